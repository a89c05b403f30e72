// Sparse attention over candidate lists (spec §4.4) with the exact CPU semantics of
// cpu::sparse_attention_head, plus the window-ring update.
//
// Design: one block (128 threads) per (token, head). The candidate list is implicit: slots
// [0, window_len) are the window part (position first+j, −1 when beyond the token), then the
// compressed entries (indexer order for CSA, ascending for HCA). Per 64-candidate block:
// warps compute q·k in double (rounded to fp32, times the scale); thread 0 runs the online
// softmax bookkeeping in list order (block max, α, sequential fp32 Σp, bf16 probabilities);
// then each thread owns head dims and accumulates Σ p_bf16·v in double in list order, and
// acc = fp32(acc)·α + fp32(Σ) — all in the CPU's order. The sink enters only the denominator.
#include <cfloat>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kBlock = 64;
constexpr int kThreads = 128;
constexpr int kMaxDimPerThread = 8;  // head_dim ≤ 1024

__device__ const float* candidate(const SparseAttnArgs& a, int64_t t, int64_t pos, int64_t j) {
  if (j < a.window_len) {
    const int64_t first = pos - a.win + 1 > 0 ? pos - a.win + 1 : 0;
    const int64_t src = first + j;
    if (src > pos) return nullptr;
    return src >= a.start_pos ? a.kv_new + (src - a.start_pos) * a.d
                              : a.ring + (src % a.win) * a.d;
  }
  const int64_t c = j - a.window_len;
  const int64_t id = a.selected ? a.selected[t * a.sel_stride + c] : c;
  return a.compressed + id * a.d;
}

__global__ void __launch_bounds__(kThreads) sparse_attention_kernel(const __grid_constant__ SparseAttnArgs a) {
  __shared__ float s[kBlock];
  __shared__ float pb[kBlock];
  __shared__ const float* ptr[kBlock];
  __shared__ float alpha_s;
  __shared__ int skip_s;
  const int64_t item = blockIdx.x;
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
  for (int64_t b0 = 0; b0 < total; b0 += kBlock) {
    const int count = int(total - b0 < kBlock ? total - b0 : kBlock);
    for (int j = warp; j < count; j += kThreads / 32) {
      const float* kv = candidate(a, t, pos, b0 + j);
      double dot = 0.0;
      if (kv != nullptr)
        for (int k = lane; k < d; k += 32) dot += double(q[k]) * double(kv[k]);
      dot = warp_sum(dot);
      if (lane == 0) {
        ptr[j] = kv;
        s[j] = kv == nullptr ? -INFINITY : float(dot) * a.scale;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float bmax = -INFINITY;
      for (int j = 0; j < count; ++j)
        if (ptr[j] != nullptr) bmax = fmaxf(bmax, s[j]);
      const float m_new = fmaxf(m, bmax);
      skip_s = m_new == -INFINITY;
      if (!skip_s) {
        const float alpha = dexpf(m - m_new);
        float p_sum = 0.0f;
        for (int j = 0; j < count; ++j) {
          if (ptr[j] == nullptr) {
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
      for (int i = 0; i * kThreads + int(threadIdx.x) < d; ++i) {
        const int k = i * kThreads + threadIdx.x;
        double pv = 0.0;
        for (int j = 0; j < count; ++j)
          if (ptr[j] != nullptr) pv += double(pb[j]) * double(ptr[j][k]);
        acc[i] = acc[i] * alpha + float(pv);
      }
    }
    __syncthreads();
  }
  __shared__ float denom_s;
  if (threadIdx.x == 0) denom_s = l + dexpf(a.sink[h] - m);
  __syncthreads();
  const float denom = denom_s;
  for (int i = 0; i * kThreads + int(threadIdx.x) < d; ++i) {
    const int k = i * kThreads + threadIdx.x;
    a.out[item * d + k] = round_bf16(acc[i] / denom);
  }
}

__global__ void ring_kernel(const float* kv, int64_t n, int64_t start_pos, int win, int d, float* ring) {
  const int64_t first = n > win ? n - win : 0;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= (n - first) * d) return;
  const int64_t t = first + idx / d, k = idx % d;
  ring[((start_pos + t) % win) * d + k] = kv[t * d + k];
}

}  // namespace

void sparse_attention(const SparseAttnArgs& a, cudaStream_t s) {
  DSV4_CHECK(a.d <= kThreads * kMaxDimPerThread, "head_dim ", a.d, " too large");
  if (a.n == 0) return;
  // KV rows each query token reads once (window part + visible/selected compressed entries).
  const int64_t last = a.start_pos + a.n;
  int64_t comp = a.ratio > 0 ? last / a.ratio : 0;
  if (a.selected != nullptr && comp > a.sel_stride) comp = a.sel_stride;
  const double kv_rows = double(a.window_len < last ? a.window_len : last) + double(comp);
  prof::Launch pl(a.ratio == 0 ? "sparse_attention (window)" : a.selected ? "sparse_attention (CSA)" : "sparse_attention (HCA)",
                  double(a.n) * (kv_rows * a.d * 4 + 2.0 * a.H * a.d * 4), s,
                  [&] { return "n=" + std::to_string(a.n) + " kv=" + std::to_string(int64_t(kv_rows)); });
  sparse_attention_kernel<<<static_cast<unsigned>(a.n * a.H), kThreads, 0, s>>>(a);
  CUDA_CHECK_LAUNCH();
}

void window_ring_update(const float* kv, int64_t n, int64_t start_pos, int win, int d, float* ring,
                        cudaStream_t s) {
  const int64_t rows = n > win ? win : n;
  if (rows == 0) return;
  prof::Launch pl("window_ring_update", double(rows) * d * 8, s);
  ring_kernel<<<static_cast<unsigned>((rows * d + 255) / 256), 256, 0, s>>>(kv, n, start_pos, win, d, ring);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
