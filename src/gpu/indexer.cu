// Lightning indexer scores and top-k (spec §4.6) on the GPU.
//
// Design: index_scores uses one warp per (token, entry): per head a double dot over the head
// dims (warp reduction), then the bf16 relu/weight products summed in head order by lane 0 —
// the CPU's exact order. index_topk ranks each visible entry by counting better entries
// (score greater, or equal with a lower id), so the result is the CPU's partial_sort order
// with ties broken by the lower id; O(visible²) per token, fine for correctness.
// Shapes: q [n, heads, dh]; weights [n, heads]; keys [entries, dh]; scores [n, stride];
// sel [n, k]; count [n]. Keys are bf16 bits (the FP4-simulated values, exact).
#include "gpu/cuda_check.h"
#include "gpu/indexer_device.cuh"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kWarps = 8;

__global__ void scores_kernel(const float* __restrict__ q, const float* __restrict__ weights,
                              const uint16_t* __restrict__ keys, int64_t start_pos, int ratio, int heads,
                              int dh, float* scores, int64_t stride) {
  const int64_t w = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t t = blockIdx.y;
  const int64_t visible = (start_pos + t + 1) / ratio;
  if (w >= visible) return;
  const int lane = threadIdx.x & 31;
  const float total = detail::index_score_warp(q + t * heads * dh, weights + t * heads, keys + w * dh, heads, dh, lane);
  if (lane == 0) scores[t * stride + w] = total;
}

__global__ void topk_kernel(const float* __restrict__ scores, int64_t start_pos, int ratio,
                            int64_t stride, int k, int32_t* sel, int32_t* count) {
  const int64_t t = blockIdx.x;
  const int64_t visible = (start_pos + t + 1) / ratio;
  detail::index_topk_block(scores + t * stride, visible, k, sel + t * k, count + t);
}

}  // namespace

void index_scores(const float* q, const float* weights, const uint16_t* keys, int64_t n,
                  int64_t start_pos, int ratio, int heads, int dh, float* scores, int64_t stride,
                  cudaStream_t s) {
  const int64_t max_visible = (start_pos + n) / ratio;
  if (n == 0 || max_visible == 0) return;
  DSV4_CHECK(n <= 65535, "too many indexer query rows: ", n);
  DSV4_CHECK(dh <= 256, "indexer head dim ", dh);
  dim3 grid(static_cast<unsigned>((max_visible + kWarps - 1) / kWarps), static_cast<unsigned>(n));
  prof::Launch pl("index_scores", double(n) * heads * (dh + 1) * 4 + double(max_visible) * dh * 2 + double(n) * max_visible * 4, s,
                  [&] { return "n=" + std::to_string(n) + " keys=" + std::to_string(max_visible); });
  scores_kernel<<<grid, kWarps * 32, 0, s>>>(q, weights, keys, start_pos, ratio, heads, dh, scores, stride);
  CUDA_CHECK_LAUNCH();
}

void index_topk(const float* scores, int64_t n, int64_t start_pos, int ratio, int64_t stride, int k,
                int32_t* sel, int32_t* count, cudaStream_t s) {
  if (n == 0) return;
  const int64_t visible_k = (start_pos + n) / ratio;
  prof::Launch pl("index_topk", double(n) * visible_k * 4 + double(n) * (k + 1) * 4, s,
                  [&] { return "n=" + std::to_string(n) + " keys=" + std::to_string(visible_k); });
  topk_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(scores, start_pos, ratio, stride, k, sel, count);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
