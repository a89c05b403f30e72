// KV compressor (spec §4.5) on the GPU: streaming state on the device.
//
// Design: the streaming state machine (compressor_token, run serially per channel by decode)
// is evaluated in parallel over a call's tokens: every entry emitted by the call depends only
// on its own window's tokens (and, overlapping, the previous window's), each either one of
// this call's projection rows (kv, score + ape) or, before start_pos, a state row. So
// compressor_step runs one thread per (emitted entry, channel) for the pool (softmax over the
// slots, fp32, the CPU's order: compressor_pool_of), then one thread per (slot, column) writes
// the state the serial walk leaves (each slot's last token; the overlap rows = the last
// emitted window) — bit-identical to walking the tokens in order. Then
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

struct StepArgs {
  const float* kv;     // [n, width] projections of positions start_pos..
  const float* score;  // [n, width]
  const float* ape;    // [r, width]
  int64_t n, start_pos;
  int r, h, width;
  bool overlap;
  float* st_kv;  // [slots, width]
  float* st_sc;
};

// Entry first + j (first = start_pos / r) for j < entries, channel c: the pool over its slots,
// each slot the token's projection (kv, score + ape, as compressor_token stores it) or, for
// tokens before start_pos, the state row holding it (the current window's rows; for the first
// entry's overlap part, rows [0, r): the previous window, already shifted there).
__global__ void pool_kernel(const __grid_constant__ StepArgs a, int64_t entries, float* rows) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= entries * a.h) return;
  const int64_t j = idx / a.h;
  const int c = int(idx % a.h), r = a.r, w = a.width;
  const int64_t e = a.start_pos / r + j;
  // Slot i of the pool: (token position, column, state row when before start_pos; −1: the
  // previous window's state row i).
  auto locate = [&](int i, int64_t& p, int& col, int& st_row) {
    if (a.overlap && i < r) {
      p = j == 0 ? -1 : (e - 1) * r + i;
      col = c;
      st_row = j == 0 ? i : r + i;
    } else {
      const int s = a.overlap ? i - r : i;
      p = e * r + s;
      col = a.overlap ? a.h + c : c;
      st_row = a.overlap ? r + s : s;
    }
  };
  auto kv_at = [&](int i) {
    int64_t p;
    int col, st;
    locate(i, p, col, st);
    return p >= a.start_pos ? a.kv[(p - a.start_pos) * w + col] : a.st_kv[int64_t(st) * w + col];
  };
  auto sc_at = [&](int i) {
    int64_t p;
    int col, st;
    locate(i, p, col, st);
    return p >= a.start_pos ? a.score[(p - a.start_pos) * w + col] + a.ape[int64_t(p % r) * w + col]
                            : a.st_sc[int64_t(st) * w + col];
  };
  rows[j * a.h + c] = detail::compressor_pool_of(a.overlap ? 2 * r : r, kv_at, sc_at);
}

// Thread (slot s, column): the state after the call's tokens. Current row (s, or r + s
// overlapping) = the last token of slot s if this call has one; overlapping, row s = the last
// emitted window's token s (shifted at its boundary) if the call emitted an entry. Runs after
// pool_kernel (which reads the old state).
__global__ void state_kernel(const __grid_constant__ StepArgs a) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int r = a.r, w = a.width;
  if (idx >= int64_t(r) * w) return;
  const int s = int(idx / w), col = int(idx % w);
  const int64_t end = a.start_pos + a.n;
  const int cur = a.overlap ? r + s : s;
  const float old_kv = a.st_kv[int64_t(cur) * w + col], old_sc = a.st_sc[int64_t(cur) * w + col];
  auto kv_of = [&](int64_t p) { return p >= a.start_pos ? a.kv[(p - a.start_pos) * w + col] : old_kv; };
  auto sc_of = [&](int64_t p) {
    return p >= a.start_pos ? a.score[(p - a.start_pos) * w + col] + a.ape[int64_t(s) * w + col] : old_sc;
  };
  if (a.overlap) {
    const int64_t total = end / r;
    if (total > a.start_pos / r) {
      const int64_t p = (total - 1) * r + s;
      a.st_kv[int64_t(s) * w + col] = kv_of(p);
      a.st_sc[int64_t(s) * w + col] = sc_of(p);
    }
  }
  if (end - 1 - s < 0) return;
  const int64_t last = (end - 1 - s) / r * r + s;  // the last position ≤ end − 1 of slot s
  if (last < a.start_pos) return;
  a.st_kv[int64_t(cur) * w + col] = kv_of(last);
  a.st_sc[int64_t(cur) * w + col] = sc_of(last);
}

// Block per entry, h threads (h ≤ 1024, a power of two for the indexer's Hadamard).
__global__ void finish_kernel(float* rows, int64_t first, int h, const float* __restrict__ norm,
                              float eps, int r, const float* __restrict__ table, int pairs, uint8_t* cache,
                              uint16_t* keys) {
  __shared__ double red[32];
  extern __shared__ double buf[];
  const int64_t entry = first + blockIdx.x;
  float* e = rows + int64_t(blockIdx.x) * h;
  detail::compressor_finish_entry(e, entry, h, norm, eps, r, table, pairs, cache == nullptr, red, buf);
  if (cache != nullptr) detail::compressor_store_entry(e, entry, cache);
  if (keys != nullptr) detail::compressor_store_index_key(e, entry, h, keys);
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
  const StepArgs a{kv, score, ape, n, start_pos, ratio, h, overlap ? 2 * h : h, overlap, state_kv, state_score};
  const int64_t entries = (start_pos + n) / ratio - start_pos / ratio;
  if (entries > 0) {
    pool_kernel<<<static_cast<unsigned>((entries * h + 255) / 256), 256, 0, s>>>(a, entries, rows);
    CUDA_CHECK_LAUNCH();
  }
  state_kernel<<<static_cast<unsigned>((int64_t{ratio} * a.width + 255) / 256), 256, 0, s>>>(a);
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
                                                                            rope_table, pairs, cache, nullptr);
  CUDA_CHECK_LAUNCH();
}

void compressor_finish_index_keys(float* rows, int64_t first, int64_t count, int h, const float* norm, float eps,
                                  int ratio, const float* rope_table, int pairs, uint16_t* keys, cudaStream_t s) {
  DSV4_CHECK(h % 64 == 0 && h <= 1024 && (h & (h - 1)) == 0, "indexer compressor head dim ", h);
  if (count == 0) return;
  prof::Launch pl("compressor_finish (indexer)", double(count) * h * 10, s);
  finish_kernel<<<static_cast<unsigned>(count), h, h * sizeof(double), s>>>(rows, first, h, norm, eps, ratio,
                                                                            rope_table, pairs, nullptr, keys);
  CUDA_CHECK_LAUNCH();
}

void compressor_reset(float* kv, float* score, int64_t count, cudaStream_t s) {
  if (count == 0) return;
  prof::Launch pl("compressor_reset", double(count) * 8, s);
  reset_kernel<<<static_cast<unsigned>((count + 255) / 256), 256, 0, s>>>(kv, score, count);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
