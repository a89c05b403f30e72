// Engine metrics, rendered as Prometheus text (hand-rolled exposition format 0.0.4).
//
// Thread-safety: counters and gauges are atomics; histograms take a small mutex. The engine
// thread writes, HTTP threads render. Names use the "dsv4:" prefix, mirroring SGLang's
// "sglang:*" set (serving.md §2); every cache pool is visible.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dsv4::engine {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends "<name>_bucket{le=...}", "_sum", "_count" lines.
  void render(const std::string& name, const std::string& help, std::string& out) const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // one per bound, plus +Inf
  double sum_ = 0;
  uint64_t total_ = 0;
};

struct EngineMetrics {
  EngineMetrics();

  std::atomic<uint64_t> requests_finished{0};  // finish reason stop or length
  std::atomic<uint64_t> requests_aborted{0};
  std::atomic<uint64_t> requests_rejected{0};  // queue full / shutting down
  std::atomic<uint64_t> prompt_tokens{0};
  std::atomic<uint64_t> generation_tokens{0};
  std::atomic<uint64_t> preemptions{0};
  std::atomic<int64_t> num_running{0};
  std::atomic<int64_t> num_queued{0};
  std::atomic<int64_t> num_used_tokens{0};
  std::atomic<double> token_usage{0};
  std::atomic<double> gen_throughput{0};
  std::atomic<int64_t> cache_total_bytes{0};
  std::atomic<int64_t> cache_used_bytes{0};

  Histogram ttft;        // seconds, arrival -> first token
  Histogram tpot;        // seconds per output token after the first
  Histogram e2e;         // seconds, arrival -> finish
  Histogram queue_time;  // seconds, arrival -> admission

  // Per-pool usage (name, fraction), replaced by the engine thread after each step.
  void set_pool_usage(std::vector<std::pair<std::string, double>> usage);

  std::string render_prometheus() const;

 private:
  mutable std::mutex pool_mu_;
  std::vector<std::pair<std::string, double>> pool_usage_;
};

}  // namespace dsv4::engine
