// KV compressor (spec §4.5) on the GPU: streaming state on the device.
//
// Design: channels are independent, so compressor_step runs one thread per output channel c
// (< h) that walks the call's tokens in order, owning state columns {c} (or {c, h+c} for the
// overlapping ratio-4 compressor). On each window boundary it pools its channel (softmax over
// the slots, fp32, the CPU's order) into the raw entry and shifts the overlap rows. Then
// compressor_finish post-processes each new entry with one block: bf16, RMSNorm, RoPE at
// position r·entry, then Q8 simulation (attention) or Hadamard + Q4 (indexer). The attention
// compressor's rows are a fp32 staging area: its finished entries go to the FP8 cache
// (kv_fp8.h) at the end of the finish (exact: encoding a Q8-simulated row is lossless).
// Shapes: kv/score projections [n, width]; ape [r, width]; state [slots, width];
// rows [emitted entries, h].
#include "gpu/compressor_device.cuh"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

__global__ void step_kernel(const float* __restrict__ kv, const float* __restrict__ score,
                            const float* __restrict__ ape, int64_t n, int64_t start_pos, int r, int h,
                            bool overlap, float* st_kv, float* st_sc, float* rows) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= h) return;
  const int width = overlap ? 2 * h : h;
  const int64_t first = start_pos / r;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = start_pos + t;
    detail::compressor_token(kv + t * width, score + t * width, ape, pos, r, h, overlap, c, st_kv, st_sc,
                             rows + (pos / r - first) * h);
  }
}

// Block per entry, h threads (h ≤ 1024, a power of two for the indexer's Hadamard).
__global__ void finish_kernel(float* rows, int64_t first, int h, const float* __restrict__ norm,
                              float eps, int r, const float* __restrict__ table, int pairs, uint8_t* cache) {
  __shared__ double red[32];
  extern __shared__ double buf[];
  const int64_t entry = first + blockIdx.x;
  float* e = rows + int64_t(blockIdx.x) * h;
  detail::compressor_finish_entry(e, entry, h, norm, eps, r, table, pairs, cache == nullptr, red, buf);
  if (cache != nullptr) detail::compressor_store_entry(e, entry, cache);
}

__global__ void reset_kernel(float* kv, float* sc, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  kv[i] = 0.0f;
  sc[i] = -INFINITY;
}

}  // namespace

void compressor_step(const float* kv, const float* score, const float* ape, int64_t n,
                     int64_t start_pos, int ratio, int h, bool overlap, float* state_kv,
                     float* state_score, float* rows, cudaStream_t s) {
  if (n == 0) return;
  const double width = double(overlap ? 2 : 1) * h, slots = double(overlap ? 2 : 1) * ratio;
  prof::Launch pl("compressor_step", double(n) * width * 8 + slots * width * 16 + double(n / ratio + 1) * h * 4, s,
                  [&] { return "n=" + std::to_string(n) + " ratio=" + std::to_string(ratio) + " h=" + std::to_string(h); });
  step_kernel<<<(h + 127) / 128, 128, 0, s>>>(kv, score, ape, n, start_pos, ratio, h, overlap, state_kv,
                                             state_score, rows);
  CUDA_CHECK_LAUNCH();
}

void compressor_finish(float* rows, int64_t first, int64_t count, int h, const float* norm,
                       float eps, int ratio, const float* rope_table, int pairs, uint8_t* cache,
                       cudaStream_t s) {
  const bool indexer = cache == nullptr;
  DSV4_CHECK(h % 64 == 0 && h <= 1024 && (!indexer || (h & (h - 1)) == 0), "compressor head dim ", h);
  DSV4_CHECK(indexer || h == kKvDim, "attention compressor head dim ", h, ": the FP8 KV cache holds ", kKvDim);
  if (count == 0) return;
  prof::Launch pl(indexer ? "compressor_finish (indexer)" : "compressor_finish",
                  double(count) * (indexer ? h * 8 : h * 8 + kKvEntryBytes), s);
  finish_kernel<<<static_cast<unsigned>(count), h, h * sizeof(double), s>>>(rows, first, h, norm, eps, ratio,
                                                                            rope_table, pairs, cache);
  CUDA_CHECK_LAUNCH();
}

void compressor_reset(float* kv, float* score, int64_t count, cudaStream_t s) {
  if (count == 0) return;
  prof::Launch pl("compressor_reset", double(count) * 8, s);
  reset_kernel<<<static_cast<unsigned>((count + 255) / 256), 256, 0, s>>>(kv, score, count);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
