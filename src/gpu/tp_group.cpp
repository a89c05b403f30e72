// TpGroup: worker threads (one per extra device) and NCCL communicators (ncclCommInitAll).
#include "gpu/tp_group.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "base/check.h"
#include "gpu/cuda_check.h"
#include "gpu/p2p_all_reduce.h"
#include "gpu/profiler.h"

#if DSV4_HAVE_NCCL
#include <nccl.h>
#endif

namespace dsv4::gpu {

#if DSV4_HAVE_NCCL
#define NCCL_CHECK(expr)                                                                        \
  do {                                                                                          \
    const ncclResult_t dsv4_nccl_r_ = (expr);                                                   \
    DSV4_CHECK(dsv4_nccl_r_ == ncclSuccess, "NCCL error in `", #expr, "`: ",                  \
               ncclGetErrorString(dsv4_nccl_r_));                                               \
  } while (0)
#endif

bool tp_supported() { return DSV4_HAVE_NCCL != 0; }

namespace {

// One thread bound to one device; runs one task at a time.
class RankWorker {
 public:
  RankWorker(int device, std::function<void()> on_error)
      : on_error_(std::move(on_error)), thread_([this, device] { loop(device); }) {}
  ~RankWorker() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start(std::function<void()> task) {
    std::lock_guard lock(mu_);
    task_ = std::move(task);
    done_ = false;
    error_ = nullptr;
    cv_.notify_all();
  }
  std::exception_ptr wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return error_;
  }

 private:
  void loop(int device) {
    const cudaError_t set = cudaSetDevice(device);
    prof::mute_this_thread();
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || task_ != nullptr; });
        if (stop_) return;
        task = std::move(task_);
        task_ = nullptr;
      }
      std::exception_ptr err;
      try {
        CUDA_CHECK(set);
        task();
      } catch (...) {
        err = std::current_exception();
        on_error_();  // unblocks the ranks waiting for this one in a collective
      }
      {
        std::lock_guard lock(mu_);
        error_ = err;
        done_ = true;
      }
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> task_;
  bool stop_ = false, done_ = true;
  std::exception_ptr error_;
  std::function<void()> on_error_;
  std::thread thread_;
};

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

struct TpGroup::Impl {
  std::vector<std::unique_ptr<RankWorker>> workers;  // ranks 1 .. size-1
  std::once_flag abort_once;
  std::atomic<bool> aborted{false};
  std::string broken;  // set after a failed run(); guarded by run()'s single caller
  std::unique_ptr<P2pAllReduce> p2p;  // decode-sized sums (nullptr: NCCL only)
  int64_t one_shot_max = 0;           // sums of at most this many floats take p2p
#if DSV4_HAVE_NCCL
  std::vector<ncclComm_t> comms;
#endif
  void abort() {
    std::call_once(abort_once, [this] {
      aborted = true;  // no new collective starts on an aborted communicator
      if (p2p) p2p->abort();  // releases kernels spinning at the one-shot barrier
#if DSV4_HAVE_NCCL
      for (ncclComm_t c : comms) ncclCommAbort(c);
      comms.clear();
#endif
    });
  }
};

TpGroup::TpGroup(int size) : size_(size), impl_(std::make_unique<Impl>()) {
  DSV4_CHECK(size >= 1, "--tp must be >= 1, got ", size);
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  DSV4_CHECK(size <= devices, "--tp ", size, " needs ", size, " GPUs; this machine has ", devices);
  if (size == 1) return;
#if DSV4_HAVE_NCCL
  impl_->comms.resize(static_cast<size_t>(size));
  std::vector<int> devs(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) devs[r] = r;
  NCCL_CHECK(ncclCommInitAll(impl_->comms.data(), size, devs.data()));
  // The one-shot kernel for decode-sized sums (PDL-launched: its launch overlaps the previous
  // kernel) up to kOneShotMaxFloats, NCCL above (docs/architecture.md); DSV4_TP_ALLREDUCE=nccl:
  // NCCL for every size; =p2p: the one-shot kernel up to its buffer size, kP2pMaxFloats.
  const char* mode = std::getenv("DSV4_TP_ALLREDUCE");
  const std::string m = mode != nullptr ? mode : "";
  if (m != "nccl" && P2pAllReduce::supported(size)) {
    impl_->p2p = std::make_unique<P2pAllReduce>(size, kP2pMaxFloats);
    impl_->one_shot_max = m == "p2p" ? kP2pMaxFloats : kOneShotMaxFloats;
  }
  for (int r = 1; r < size; ++r) impl_->workers.push_back(std::make_unique<RankWorker>(r, [this] { impl_->abort(); }));
#else
  DSV4_FAIL("--tp ", size, " needs NCCL, and this build has none (nccl.h was not found at configure time)");
#endif
}

TpGroup::~TpGroup() {
  impl_->workers.clear();
#if DSV4_HAVE_NCCL
  for (ncclComm_t c : impl_->comms) ncclCommDestroy(c);  // empty after an abort
#endif
}

void TpGroup::run(const std::function<void(int)>& f) {
  DSV4_CHECK(impl_->broken.empty(), "tensor-parallel group unusable after an earlier error: ", impl_->broken);
  for (int r = 1; r < size_; ++r) impl_->workers[r - 1]->start([&f, r] { f(r); });
  std::exception_ptr first;
  try {
    CUDA_CHECK(cudaSetDevice(0));
    f(0);
  } catch (...) {
    first = std::current_exception();
    if (size_ > 1) impl_->abort();
  }
  for (int r = 1; r < size_; ++r) {
    std::exception_ptr e = impl_->workers[r - 1]->wait();
    if (!first && e) first = e;
  }
  if (first) {
    if (size_ > 1) impl_->broken = what_of(first);
    std::rethrow_exception(first);
  }
}

void TpGroup::all_reduce_sum(int rank, float* x, int64_t count, cudaStream_t stream) {
  if (size_ == 1) return;
#if DSV4_HAVE_NCCL
  DSV4_CHECK(!impl_->aborted, "tensor-parallel communicators aborted after an error on another rank");
  if (uses_one_shot(count)) {
    impl_->p2p->run(rank, x, count, stream);
    return;
  }
  NCCL_CHECK(ncclAllReduce(x, x, static_cast<size_t>(count), ncclFloat32, ncclSum, impl_->comms[rank], stream));
#else
  (void)rank, (void)x, (void)count, (void)stream;
#endif
}

bool TpGroup::all_reduce_sum_hc_post(int rank, float* x, int64_t count, const P2pAllReduce::HcPost& hc,
                                     cudaStream_t stream) {
  if (!fuses_hc_post(x, count, hc)) return false;
  DSV4_CHECK(!impl_->aborted, "tensor-parallel communicators aborted after an error on another rank");
  impl_->p2p->run(rank, x, count, stream, &hc);
  return true;
}

bool TpGroup::fuses_hc_post(const float* x, int64_t count, const P2pAllReduce::HcPost& hc) const {
  return uses_one_shot(count) && P2pAllReduce::fits(x, count, hc);
}

bool TpGroup::uses_one_shot(int64_t count) const { return impl_->p2p != nullptr && count <= impl_->one_shot_max; }

void TpGroup::transfer_bytes(int rank, int from, int to, void* data, int64_t bytes, cudaStream_t stream) {
  DSV4_CHECK(from != to && from >= 0 && to >= 0 && from < size_ && to < size_ && (rank == from || rank == to),
             "transfer_bytes: rank ", rank, " in a transfer from ", from, " to ", to, " (group of ", size_, ")");
  DSV4_CHECK(bytes >= 0, "transfer_bytes: ", bytes, " bytes");
#if DSV4_HAVE_NCCL
  DSV4_CHECK(!impl_->aborted, "tensor-parallel communicators aborted after an error on another rank");
  if (rank == from)
    NCCL_CHECK(ncclSend(data, static_cast<size_t>(bytes), ncclUint8, to, impl_->comms[rank], stream));
  else
    NCCL_CHECK(ncclRecv(data, static_cast<size_t>(bytes), ncclUint8, from, impl_->comms[rank], stream));
#else
  (void)data, (void)stream;
#endif
}

}  // namespace dsv4::gpu
