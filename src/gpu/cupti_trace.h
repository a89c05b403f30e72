// CUPTI kernel activity tracing for `dsv4 profile`: per-kernel start/end timestamps, also for
// kernels replayed from a CUDA graph (where CUDA events around each launch cannot be used).
//
// libcupti is not linked: load() opens it at run time (dlopen: libcupti.so.13, libcupti.so,
// then the CUDA toolkit's lib64/, lib/ and extras/CUPTI/lib64/) and resolves the few entry
// points used. When it cannot be loaded, or the build had no cupti_activity.h, load() says why
// and the caller goes without.
//
// Records arrive through CUPTI's asynchronous buffer callbacks (CUPTI_ACTIVITY_KIND_
// CONCURRENT_KERNEL). With correlation on, the RUNTIME/DRIVER API and EXTERNAL_CORRELATION
// kinds are enabled as well and a prof::LaunchObserver pushes each profiled launch's index as a
// CUPTI external correlation id, so every kernel record of that stretch names its prof::Launch
// (KernelRecord::launch, an index into launches()); see kernel_attribution.h.
//
// One KernelTrace at a time (CUPTI's activity buffers are process-wide). Not thread-safe:
// start/take/stop from the thread that launches.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/kernel_attribution.h"

namespace dsv4::gpu::cupti {

// Loads libcupti once; false (and *why) when it is not usable. Safe to call repeatedly.
bool load(std::string* why = nullptr);
// "libcupti.so.13 (CUPTI API 130000)" once loaded; empty before.
std::string describe();

class KernelTrace {
 public:
  KernelTrace();
  ~KernelTrace();  // stops a running trace
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // Starts collecting kernel records (load() must have succeeded).
  void start();
  // Correlates the kernels of profiled launches (prof::set_enabled(true)) with the launch
  // log while on; off again before capturing a graph. Clears the launch log when turned on.
  void set_correlation(bool on);
  // Waits for the device, flushes CUPTI and returns the records collected since start() or
  // the last take(), of CUDA device `device` only (-1: all devices).
  std::vector<prof::KernelRecord> take(int device = -1);
  // take() and stop collecting.
  std::vector<prof::KernelRecord> stop(int device = -1);
  // The profiled launches seen while correlation was on, in launch order.
  const std::vector<prof::LaunchEntry>& launches() const;
  bool running() const { return running_; }
  // Records CUPTI dropped (no buffer space) since start(), as far as it reports them.
  int64_t dropped_records() const;

 private:
  struct Observer;
  std::unique_ptr<Observer> observer_;
  bool running_ = false, correlating_ = false;
};

}  // namespace dsv4::gpu::cupti
