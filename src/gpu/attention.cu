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
// The ring and the compressed entries are FP8 cache buffers (kv_fp8.h); the ring update
// encodes one token row per warp (exact: the rows are already Q8-simulated).
#include <cfloat>

#include "gpu/attention_device.cuh"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/kv_fp8.cuh"
#include "gpu/ops.h"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kThreads = detail::kSparseAttnThreads;

__global__ void __launch_bounds__(kThreads) sparse_attention_kernel(const __grid_constant__ SparseAttnArgs a) {
  detail::sparse_attention_item(a, blockIdx.x);
}

constexpr int kRingWarps = 8;

// One warp per written token t ∈ [first, n): entry (start_pos + t) % win.
__global__ void ring_kernel(const float* kv, int64_t n, int64_t start_pos, int win, uint8_t* ring) {
  const int64_t first = n > win ? n - win : 0;
  const int64_t t = first + int64_t(blockIdx.x) * kRingWarps + (threadIdx.x >> 5);
  if (t >= n) return;
  const int64_t e = (start_pos + t) % win;
  kv_encode_entry_warp(kv + t * kKvDim, ring + kv_cache_data_offset(e), ring + kv_cache_scale_offset(e),
                       int(threadIdx.x & 31));
}

}  // namespace

void sparse_attention(const SparseAttnArgs& a, cudaStream_t s) {
  DSV4_CHECK(a.d == kKvDim, "head_dim ", a.d, ": the FP8 KV caches hold ", kKvDim, "-wide entries");
  if (a.n == 0) return;
  // KV rows each query token reads once (window part + visible/selected compressed entries).
  const int64_t last = a.start_pos + a.n;
  int64_t comp = a.ratio > 0 ? last / a.ratio : 0;
  if (a.selected != nullptr && comp > a.sel_stride) comp = a.sel_stride;
  const double kv_rows = double(a.window_len < last ? a.window_len : last) + double(comp);
  prof::Launch pl(a.ratio == 0 ? "sparse_attention (window)" : a.selected ? "sparse_attention (CSA)" : "sparse_attention (HCA)",
                  double(a.n) * (kv_rows * kKvEntryBytes + 2.0 * a.H * a.d * 4), s,
                  [&] { return "n=" + std::to_string(a.n) + " kv=" + std::to_string(int64_t(kv_rows)); });
  sparse_attention_kernel<<<static_cast<unsigned>(a.n * a.H), kThreads, 0, s>>>(a);
  CUDA_CHECK_LAUNCH();
}

void window_ring_update(const float* kv, int64_t n, int64_t start_pos, int win, int d, uint8_t* ring,
                        cudaStream_t s) {
  DSV4_CHECK(d == kKvDim, "head_dim ", d, ": the FP8 KV caches hold ", kKvDim, "-wide entries");
  const int64_t rows = n > win ? win : n;
  if (rows == 0) return;
  prof::Launch pl("window_ring_update", double(rows) * (d * 4 + kKvEntryBytes), s);
  ring_kernel<<<static_cast<unsigned>((rows + kRingWarps - 1) / kRingWarps), kRingWarps * 32, 0, s>>>(
      kv, n, start_pos, win, ring);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
