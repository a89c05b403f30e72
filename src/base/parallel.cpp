#include "base/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {
namespace {

// A fixed pool: workers wait for a generation counter, run their chunk, report done.
class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { loop(i + 1); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()) + 1; }

  void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int parts) {
    std::lock_guard call_lock(call_mu_);
    {
      std::lock_guard lock(mu_);
      fn_ = &fn;
      n_ = n;
      parts_ = parts;
      pending_ = parts - 1;
      ++generation_;
    }
    cv_.notify_all();
    run_part(0);
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  void run_part(int part) {
    int64_t begin = n_ * part / parts_;
    int64_t end = n_ * (part + 1) / parts_;
    if (begin < end) (*fn_)(begin, end);
  }
  void loop(int part) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        if (part >= parts_) continue;
      }
      run_part(part);
      {
        std::lock_guard lock(mu_);
        if (--pending_ == 0) done_cv_.notify_one();
      }
    }
  }

  std::vector<std::thread> threads_;
  std::mutex call_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int parts_ = 1;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

int configured_threads() {
  if (const char* env = std::getenv("DSV4_NUM_THREADS")) {
    int v = std::atoi(env);
    if (v > 0) return std::min(v, 256);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

Pool& pool() {
  static Pool instance(configured_threads() - 1);
  return instance;
}

thread_local bool in_parallel_region = false;

}  // namespace

int num_threads() { return pool().size(); }

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  int parts = static_cast<int>(std::min<int64_t>(num_threads(), n / std::max<int64_t>(1, min_chunk)));
  if (parts <= 1 || in_parallel_region) {
    fn(0, n);
    return;
  }
  // An exception in any chunk is carried back to the caller (the first one wins).
  std::mutex error_mu;
  std::exception_ptr error;
  auto wrapped = [&](int64_t b, int64_t e) {
    in_parallel_region = true;
    try {
      fn(b, e);
    } catch (...) {
      std::lock_guard lock(error_mu);
      if (!error) error = std::current_exception();
    }
    in_parallel_region = false;
  };
  pool().run(n, wrapped, parts);
  if (error) std::rethrow_exception(error);
}

}  // namespace dsv4
