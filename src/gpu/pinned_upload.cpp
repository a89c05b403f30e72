#include "gpu/pinned_upload.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "gpu/cuda_check.h"

namespace dsv4::gpu {

PinnedUploader::PinnedUploader(double expected_bytes, bool print_progress, size_t chunk_bytes)
    : chunk_(chunk_bytes), expected_(expected_bytes), print_(print_progress) {
  for (int i = 0; i < 2; ++i) {
    CUDA_CHECK(cudaMallocHost(&pinned_[i], chunk_));
    CUDA_CHECK(cudaEventCreateWithFlags(&free_[i], cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  t0_ = last_print_ = std::chrono::steady_clock::now();
}

PinnedUploader::~PinnedUploader() {
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
  for (int i = 0; i < 2; ++i) {
    cudaEventDestroy(free_[i]);
    cudaFreeHost(pinned_[i]);
  }
}

void PinnedUploader::copy(void* device_dst, const void* host_src, size_t bytes) {
  auto* dst = static_cast<char*>(device_dst);
  const auto* src = static_cast<const char*>(host_src);
  for (size_t off = 0; off < bytes; off += chunk_) {
    const size_t n = std::min(chunk_, bytes - off);
    const int b = next_;
    next_ ^= 1;
    CUDA_CHECK(cudaEventSynchronize(free_[b]));  // the chunk's previous transfer is done
    std::memcpy(pinned_[b], src + off, n);
    CUDA_CHECK(cudaMemcpyAsync(dst + off, pinned_[b], n, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaEventRecord(free_[b], stream_));
  }
  done_ += static_cast<double>(bytes);
  report(false);
}

void PinnedUploader::finish() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  report(true);
}

void PinnedUploader::report(bool last) {
  if (!print_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!last && now - last_print_ < std::chrono::seconds(1)) return;
  last_print_ = now;
  const double s = std::chrono::duration<double>(now - t0_).count();
  const double gib = double(1u << 30);
  std::fprintf(stderr, "\r[load] %.1f / %.1f GiB (%3.0f%%), %.2f GB/s%s", done_ / gib, expected_ / gib,
               expected_ > 0 ? std::min(100.0, 100.0 * done_ / expected_) : 0.0, s > 0 ? done_ / s / 1e9 : 0.0,
               last ? "\n" : "");
}

}  // namespace dsv4::gpu
