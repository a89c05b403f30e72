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

#include "gpu/attention_device.cuh"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kThreads = detail::kSparseAttnThreads;
constexpr int kMaxDimPerThread = detail::kMaxDimPerThread;

__global__ void __launch_bounds__(kThreads) sparse_attention_kernel(const __grid_constant__ SparseAttnArgs a) {
  detail::sparse_attention_item(a, blockIdx.x);
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
