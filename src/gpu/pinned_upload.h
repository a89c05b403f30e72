// Host → device weight upload through pinned staging buffers, with a progress line.
//
// copy() copies the host bytes into one of two pinned chunks (chunk_bytes each) and queues an
// asynchronous copy of that chunk on the uploader's own stream, so reading the next chunk from
// the (usually mmap'ed) checkpoint overlaps the previous transfer. The source may be freed as
// soon as copy() returns. finish() waits for every queued copy. Progress: at most once a
// second, when enabled, "[load] done / expected GiB (pct), GB/s" on stderr (expected_bytes is
// an estimate; the line is informative only).
// Thread-safety: one uploader per thread (tensor-parallel ranks each own one).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace dsv4::gpu {

class PinnedUploader {
 public:
  PinnedUploader(double expected_bytes, bool print_progress, size_t chunk_bytes = size_t{64} << 20);
  ~PinnedUploader();
  PinnedUploader(const PinnedUploader&) = delete;
  PinnedUploader& operator=(const PinnedUploader&) = delete;

  void copy(void* device_dst, const void* host_src, size_t bytes);
  void finish();
  double bytes_done() const { return done_; }

 private:
  void report(bool last);
  size_t chunk_;
  void* pinned_[2] = {nullptr, nullptr};
  cudaEvent_t free_[2] = {nullptr, nullptr};
  cudaStream_t stream_ = nullptr;
  int next_ = 0;
  double expected_, done_ = 0;
  bool print_;
  std::chrono::steady_clock::time_point t0_, last_print_;
};

}  // namespace dsv4::gpu
