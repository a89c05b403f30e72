// Launchers of the FP8 KV cache codec (ops.h, kv_fp8.cu section): rows ↔ entries of a
// GpuModel cache buffer (kv_fp8.h layout, pages of kKvCachePage). Tests, benchmark fills and
// debugging; the model's own writes are fused into the ring / compressor kernels.
#include "gpu/cuda_check.h"
#include "gpu/kv_fp8.cuh"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kWarps = 8;

// One warp per row.
__global__ void encode_kernel(const float* __restrict__ x, int64_t n, uint8_t* cache, int64_t first) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= n) return;
  const int64_t e = first + r;
  kv_encode_entry_warp(x + r * kKvDim, cache + kv_cache_data_offset(e), cache + kv_cache_scale_offset(e),
                       int(threadIdx.x & 31));
}

__global__ void decode_kernel(const uint8_t* __restrict__ cache, int64_t first, int64_t n, float* out) {
  pdl_wait();
  pdl_trigger();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * kKvDim) return;
  const int64_t r = idx / kKvDim;
  const int k = int(idx % kKvDim);
  const KvRow row = kv_row_cache(cache, first + r);
  out[idx] = kv_decode_value(row.data, row.scales, k);
}

}  // namespace

void kv_encode_rows(const float* x, int64_t n, uint8_t* cache, int64_t first, cudaStream_t s) {
  if (n == 0) return;
  prof::Launch pl("kv_encode", double(n) * (kKvDim * 4 + kKvEntryBytes), s);
  launch_pdl(encode_kernel, static_cast<unsigned>((n + kWarps - 1) / kWarps), kWarps * 32, 0, s, x, n, cache, first);
}

void kv_decode_rows(const uint8_t* cache, int64_t first, int64_t n, float* out, cudaStream_t s) {
  if (n == 0) return;
  prof::Launch pl("kv_decode", double(n) * (kKvDim * 4 + kKvEntryBytes), s);
  launch_pdl(decode_kernel, static_cast<unsigned>((n * kKvDim + 255) / 256), 256, 0, s, cache, first, n, out);
}

}  // namespace dsv4::gpu
