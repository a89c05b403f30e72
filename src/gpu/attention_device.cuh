// Device-side body of the sparse attention (spec §4.4) shared by attention.cu (host start
// positions) and decode_kernels.cu (per-row device positions): same arithmetic, same order.
// See attention.cu for the design; SparseAttnArgs (ops.h) gives the shapes. KV rows are read
// through KvRow (kv_fp8.cuh): this call's fp32 rows, or FP8 cache entries decoded per value
// (exactly the Q8-simulated values that were written, so the arithmetic sees the same floats).
#pragma once

#include <cfloat>

#include "gpu/device_math.cuh"
#include "gpu/kv_fp8.cuh"
#include "gpu/ops.h"

namespace dsv4::gpu::detail {

constexpr int kSparseAttnBlock = 64;  // candidates per online-softmax block
constexpr int kSparseAttnThreads = 128;
constexpr int kMaxDimPerThread = 8;  // head_dim ≤ 1024

__device__ __forceinline__ KvRow sparse_attention_candidate(const SparseAttnArgs& a, int64_t t, int64_t pos, int64_t j) {
  if (j < a.window_len) {
    const int64_t first = pos - a.win + 1 > 0 ? pos - a.win + 1 : 0;
    const int64_t src = first + j;
    if (src > pos) return KvRow{nullptr, nullptr, nullptr};
    return src >= a.start_pos ? kv_row_f32(a.kv_new + (src - a.start_pos) * a.d) : kv_row_cache(a.ring, src % a.win);
  }
  const int64_t c = j - a.window_len;
  const int64_t id = a.selected ? a.selected[t * a.sel_stride + c] : c;
  return kv_row_cache(a.compressed, id);
}

// One (token, head) item = t·H + h of the call, by a block of kSparseAttnThreads threads.
__device__ __forceinline__ void sparse_attention_item(const SparseAttnArgs& a, int64_t item) {
  __shared__ float s[kSparseAttnBlock];
  __shared__ float pb[kSparseAttnBlock];
  __shared__ KvRow ptr[kSparseAttnBlock];
  __shared__ float alpha_s;
  __shared__ int skip_s;
  const int64_t t = item / a.H;
  const int h = int(item % a.H);
  const int64_t pos = a.start_pos + t;
  const int d = a.d;
  const float* q = a.q + item * d;
  int64_t comp = 0;
  if (a.ratio > 0) comp = a.selected ? a.sel_count[t] : (pos + 1) / a.ratio;
  const int64_t total = a.window_len + comp;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float acc[kMaxDimPerThread];
  for (int i = 0; i < kMaxDimPerThread; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // meaningful in thread 0
  for (int64_t b0 = 0; b0 < total; b0 += kSparseAttnBlock) {
    const int count = int(total - b0 < kSparseAttnBlock ? total - b0 : kSparseAttnBlock);
    for (int j = warp; j < count; j += kSparseAttnThreads / 32) {
      const KvRow kv = sparse_attention_candidate(a, t, pos, b0 + j);
      const bool valid = kv_row_valid(kv);
      double dot = 0.0;
      if (valid)
        for (int k = lane; k < d; k += 32) dot += double(q[k]) * double(kv_row_value(kv, k));
      dot = warp_sum(dot);
      if (lane == 0) {
        ptr[j] = kv;
        s[j] = valid ? float(dot) * a.scale : -INFINITY;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float bmax = -INFINITY;
      for (int j = 0; j < count; ++j)
        if (kv_row_valid(ptr[j])) bmax = fmaxf(bmax, s[j]);
      const float m_new = fmaxf(m, bmax);
      skip_s = m_new == -INFINITY;
      if (!skip_s) {
        const float alpha = dexpf(m - m_new);
        float p_sum = 0.0f;
        for (int j = 0; j < count; ++j) {
          if (!kv_row_valid(ptr[j])) {
            pb[j] = 0.0f;
            continue;
          }
          const float p = dexpf(s[j] - m_new);
          p_sum += p;
          pb[j] = round_bf16(p);
        }
        l = fmaf(l, alpha, p_sum);
        m = m_new;
        alpha_s = alpha;
      }
    }
    __syncthreads();
    if (!skip_s) {
      const float alpha = alpha_s;
      for (int i = 0; i * kSparseAttnThreads + int(threadIdx.x) < d; ++i) {
        const int k = i * kSparseAttnThreads + threadIdx.x;
        double pv = 0.0;
        for (int j = 0; j < count; ++j)
          if (kv_row_valid(ptr[j])) pv += double(pb[j]) * double(kv_row_value(ptr[j], k));
        acc[i] = acc[i] * alpha + float(pv);
      }
    }
    __syncthreads();
  }
  __shared__ float denom_s;
  if (threadIdx.x == 0) denom_s = l + dexpf(a.sink[h] - m);
  __syncthreads();
  const float denom = denom_s;
  for (int i = 0; i * kSparseAttnThreads + int(threadIdx.x) < d; ++i) {
    const int k = i * kSparseAttnThreads + threadIdx.x;
    a.out[item * d + k] = round_bf16(acc[i] / denom);
  }
}

}  // namespace dsv4::gpu::detail
