// Per-kernel profiling of the CUDA backend: a registry every launcher reports to.
//
// Each launcher in ops.h opens a `prof::Launch` around its kernel launch with the kernel's
// name, a shape tag and the bytes the kernel must move (its own accounting: weights and
// activations read + outputs written, each byte counted once). With profiling off (the
// default) a Launch costs one relaxed atomic load. With profiling on, a Launch records a
// CUDA event pair around the launch on the launch's stream; collect() waits for the device
// and turns the events into per-kernel totals.
//
// Event pairs per launch work only for launches issued eagerly (no CUDA graph capture):
// inside a stream capture the Launch records the bytes and the call but no time. Graph
// replays are profiled from CUPTI kernel records instead (cupti_trace.h, attributed to
// launcher names by kernel_attribution.h through a LaunchObserver).
// Thread-safety: one thread launches at a time (like GpuModel); collect/reset from it too.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::model {
struct ModelConfig;
}  // namespace dsv4::model

namespace dsv4::gpu {
class GpuModel;
}  // namespace dsv4::gpu

namespace dsv4::gpu::prof {

namespace detail {
extern std::atomic<bool> g_enabled;
inline thread_local bool t_muted = false;
void begin(const char* kernel, const std::string& shape, double bytes, cudaStream_t s, void** token);
void end(void* token, cudaStream_t s);
}  // namespace detail

inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed) && !detail::t_muted; }
void set_enabled(bool on);
// Launches from the calling thread are never recorded (tensor-parallel peer ranks: the
// profile shows rank 0).
inline void mute_this_thread() { detail::t_muted = true; }

// Sees every recorded launch (profiling on, thread not muted), on the launching thread:
// on_begin just before the kernel is launched, on_end just after.
class LaunchObserver {
 public:
  virtual ~LaunchObserver() = default;
  virtual void on_begin(const char* kernel, double bytes) = 0;
  virtual void on_end() = 0;
};
// nullptr: none (the default). The observer must outlive its registration.
void set_launch_observer(LaunchObserver* observer);

// RAII around one kernel launch. `shape` is built only when profiling is on.
class Launch {
 public:
  template <class ShapeFn>
  Launch(const char* kernel, double bytes, cudaStream_t s, ShapeFn&& shape) : s_(s) {
    if (enabled()) detail::begin(kernel, shape(), bytes, s, &token_);
  }
  Launch(const char* kernel, double bytes, cudaStream_t s) : s_(s) {
    if (enabled()) detail::begin(kernel, std::string(), bytes, s, &token_);
  }
  ~Launch() {
    if (token_ != nullptr) detail::end(token_, s_);
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

 private:
  cudaStream_t s_;
  void* token_ = nullptr;
};

struct KernelStat {
  std::string kernel;  // launcher name, e.g. "lin8"
  std::string shape;   // e.g. "rows=1 out=1024 in=4096" (empty when grouped by kernel)
  int64_t calls = 0;
  double us = 0;       // sum of event-timed durations (0 when captured into a graph)
  double bytes = 0;    // sum of the launchers' byte accounting
  // Per execution (CUPTI records only, kernel_attribution.h; 0 otherwise): median and longest span.
  double median_call_us = 0, max_call_us = 0;
};

// Waits for the device, resolves the pending events and returns totals since the last
// reset(), sorted by time (descending). by_shape: one row per (kernel, shape).
std::vector<KernelStat> collect(bool by_shape = false);
// Drops all records (and pending events).
void reset();

// Helpers shared by `dsv4 profile`, the GPU runner and the benchmarks.
// The config cut to its first num_layers trunk layers (MTP blocks kept); <= 0: unchanged.
model::ModelConfig with_num_layers(model::ModelConfig cfg, int num_layers);
// Device-to-device copy bandwidth (cudaMemcpyAsync of `bytes`, read + written), GB/s,
// the median of `iters` event-timed copies after a warm-up.
double measure_copy_bandwidth_gbs(int64_t bytes = int64_t{1} << 30, int iters = 10);

// Expected number of distinct experts that n tokens touch when each picks k of E uniformly
// (without repeats): E·(1 − (1 − k/E)^n), since a token misses a given expert with probability
// 1 − k/E. The roofline's expert count and the MoE launch's byte estimate.
double expected_distinct_experts(double E, double k, double n);

// Bytes one decode step (one new token for each of `batch` sequences at `context` positions)
// must read at least, from the model's own buffers: weights once per step (routed experts:
// the expected number of distinct experts batch·k picks touch), plus each sequence's state
// as this backend stores it (window and visible/selected compressed KV as 584-byte FP8
// entries, fp32 indexer keys).
struct DecodeBytes {
  double dense_weights = 0;   // everything but routed experts, embedding and MTP
  double expert_weights = 0;  // expected distinct routed experts
  double state_per_sequence = 0;
  double expected_experts_per_layer = 0;
  double total(int batch) const { return dense_weights + expert_weights + batch * state_per_sequence; }
};
DecodeBytes decode_must_read(const GpuModel& model, int batch, int64_t context);

}  // namespace dsv4::gpu::prof
