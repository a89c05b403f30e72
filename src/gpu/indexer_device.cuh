// Device-side pieces of the lightning indexer (spec §4.6) shared by indexer.cu (host start
// positions) and decode_kernels.cu (per-row device positions): same arithmetic, same order.
// Shapes: q_t [heads, dh]; weights_t [heads]; key [dh] (bf16 bits); scores_t [visible]; sel_t [k].
#pragma once

#include "gpu/device_math.cuh"

namespace dsv4::gpu::detail {

// Score of one key for one query token, computed by a whole warp (valid in every lane): per
// head a double dot over the head dims (warp reduction), then the bf16 relu/weight products
// summed in head order. The key (bf16, the exact FP4-simulated values) is read once per lane.
__device__ __forceinline__ float index_score_warp(const float* qt, const float* weights_t, const uint16_t* key,
                                                  int heads, int dh, int lane) {
  constexpr int kMaxPerLane = 8;  // dh ≤ 256
  float kv[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) kv[i] = lane + 32 * i < dh ? bf16_bits_to_float(key[lane + 32 * i]) : 0.0f;
  float total = 0.0f;
  for (int h = 0; h < heads; ++h) {
    double dot = 0.0;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int k = lane + 32 * i;
      if (k < dh) dot += double(qt[h * dh + k]) * double(kv[i]);
    }
    dot = warp_sum(dot);
    const float sv = fmaxf(round_bf16(float(dot)), 0.0f);
    total += round_bf16(sv * weights_t[h]);
  }
  return round_bf16(total);
}

// Top-k of one token's `visible` scores by one block: ids by descending score, ties → lower
// id, into sel_t[0, min(k, visible)); *count_t = min(k, visible).
__device__ __forceinline__ void index_topk_block(const float* s, int64_t visible, int k, int32_t* sel_t,
                                                 int32_t* count_t) {
  for (int64_t w = threadIdx.x; w < visible; w += blockDim.x) {
    const float sw = s[w];
    int64_t rank = 0;
    for (int64_t v = 0; v < visible && rank < k; ++v) {
      const float sv = s[v];
      rank += (sv > sw || (sv == sw && v < w)) ? 1 : 0;
    }
    if (rank < k) sel_t[rank] = int32_t(w);
  }
  if (threadIdx.x == 0) *count_t = int32_t(visible < k ? visible : k);
}

}  // namespace dsv4::gpu::detail
