// A second CUDA stream that work can be forked onto and joined back from, ordered by one reusable
// event (GpuModel's decode branches). Each order() records the event on one stream and makes the
// other wait on it at once, so one event serves every fork and join; under stream capture this
// builds a parallel branch of the same graph.
#pragma once

#include <cuda_runtime.h>

#include "gpu/cuda_check.h"

namespace dsv4::gpu {

class StreamFork {
 public:
  // A non-blocking stream and a timing-free event on the current device.
  StreamFork() {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~StreamFork() {
    if (event_ != nullptr) cudaEventDestroy(event_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  StreamFork(const StreamFork&) = delete;
  StreamFork& operator=(const StreamFork&) = delete;

  cudaStream_t stream() const { return stream_; }
  // Work enqueued on `waiter` from now on runs after everything enqueued on `signaller` so far.
  void order(cudaStream_t signaller, cudaStream_t waiter) {
    CUDA_CHECK(cudaEventRecord(event_, signaller));
    CUDA_CHECK(cudaStreamWaitEvent(waiter, event_, 0));
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

}  // namespace dsv4::gpu
