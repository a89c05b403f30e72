// Device-side pieces of the KV compressor (spec §4.5) shared by compressor.cu (host start
// positions) and decode_kernels.cu (per-row device positions), so both paths run the same
// arithmetic in the same order (bit-identical results).
// Shapes: state kv/score [slots, width] (width = h, or 2h for the overlapping compressor);
// ape [r, width]; an entry row [h] (fp32 while raw / being finished; the attention
// compressor's finished entries are then encoded into the FP8 cache, kv_fp8.h).
#pragma once

#include "gpu/device_math.cuh"
#include "gpu/kv_fp8.cuh"

namespace dsv4::gpu::detail {

// Σ_i kv_at(i)·softmax(sc_at)_i over `count` slots, in slot order (the CPU's fp32 order).
template <class KvAt, class ScAt>
__device__ __forceinline__ float compressor_pool_of(int count, const KvAt& kv_at, const ScAt& sc_at) {
  float m = -INFINITY;
  for (int i = 0; i < count; ++i) m = fmaxf(m, sc_at(i));
  float sum = 0.0f;
  for (int i = 0; i < count; ++i) sum += dexpf(sc_at(i) - m);
  float out = 0.0f;
  for (int i = 0; i < count; ++i) out += kv_at(i) * (dexpf(sc_at(i) - m) / sum);
  return out;
}

// The pool over the state (two segments: rows [0, r) column ca, rows [r, 2r) column cb for
// overlap; one segment for non-overlap).
__device__ __forceinline__ float compressor_pool(const float* kv, const float* sc, int width, int r, bool overlap,
                                                 int ca, int cb) {
  const int count = overlap ? 2 * r : r;
  auto at = [&](const float* base, int sidx) {
    return (overlap && sidx >= r) ? base[sidx * width + cb] : base[sidx * width + ca];
  };
  return compressor_pool_of(count, [&](int i) { return at(kv, i); }, [&](int i) { return at(sc, i); });
}

// One token of channel c at position pos: writes the state slot, and on a window boundary
// ((pos+1) % r == 0) pools channel c of the raw entry pos / r into entry[c] and shifts the
// overlap rows. Returns whether an entry was emitted.
__device__ __forceinline__ bool compressor_token(const float* kv_t, const float* score_t, const float* ape,
                                                 int64_t pos, int r, int h, bool overlap, int c, float* st_kv,
                                                 float* st_sc, float* entry) {
  const int width = overlap ? 2 * h : h;
  const int ncols = overlap ? 2 : 1;
  const int slot = int(pos % r);
  const int row = overlap ? r + slot : slot;
  for (int ci = 0; ci < ncols; ++ci) {
    const int col = c + ci * h;
    st_kv[row * width + col] = kv_t[col];
    st_sc[row * width + col] = score_t[col] + ape[slot * width + col];
  }
  if ((pos + 1) % r != 0) return false;
  entry[c] = compressor_pool(st_kv, st_sc, width, r, overlap, c, h + c);
  if (overlap) {
    for (int s = 0; s < r; ++s)
      for (int ci = 0; ci < 2; ++ci) {
        const int col = c + ci * h;
        st_kv[s * width + col] = st_kv[(r + s) * width + col];
        st_sc[s * width + col] = st_sc[(r + s) * width + col];
      }
  }
  return true;
}

// Post-processing of one raw entry e (its index `entry`) by a block of exactly h threads:
// bf16, RMSNorm(norm), RoPE at position r·entry, then Q8 (block 64) of the no-rope dims
// (indexer = false) or Hadamard + Q4 (block 32) (indexer = true). red: 32 shared doubles;
// buf: h shared doubles.
__device__ __forceinline__ void compressor_finish_entry(float* e, int64_t entry, int h, const float* norm, float eps,
                                                        int r, const float* table, int pairs, bool indexer,
                                                        double* red, double* buf) {
  const int k = threadIdx.x;
  const float v = round_bf16(e[k]);
  const double ss = block_sum(double(v) * double(v), red);
  const float ms = float(ss / double(h));
  const float rs = 1.0f / sqrtf(ms + eps);
  e[k] = round_bf16(norm[k] * (v * rs));
  __syncthreads();
  const int rope0 = h - 2 * pairs;
  if (k >= rope0 && ((k - rope0) & 1) == 0) {
    const int i = (k - rope0) / 2;
    const int64_t pos = entry * r;
    const float c = table[(pos * pairs + i) * 2], sn = table[(pos * pairs + i) * 2 + 1];
    const float a = e[k], b = e[k + 1];
    e[k] = round_bf16(a * c - b * sn);
    e[k + 1] = round_bf16(a * sn + b * c);
  }
  __syncthreads();
  if (!indexer) {
    // Q8 (block 64) on the no-rope dims: one thread per block.
    if (k < rope0 / 64) {
      float* blk = e + k * 64;
      float amax = 0.0f;
      for (int i = 0; i < 64; ++i) amax = fmaxf(amax, fabsf(blk[i]));
      const float sc = q8_block_scale(amax), inv = 1.0f / sc;  // a power of two: v·inv == v / sc exactly
      for (int i = 0; i < 64; ++i)
        blk[i] = round_bf16(e4m3_to_float(float_to_e4m3(fminf(fmaxf(blk[i] * inv, -448.0f), 448.0f))) * sc);
    }
    return;
  }
  buf[k] = e[k];
  __syncthreads();
  for (int s = 1; s < h; s *= 2) {
    const double a = buf[k], b = buf[k ^ s];
    const double nv = (k & s) ? b - a : a + b;
    __syncthreads();
    buf[k] = nv;
    __syncthreads();
  }
  e[k] = round_bf16(float(buf[k]) * float(1.0 / sqrt(double(h))));
  __syncthreads();
  if (k < h / 32) {
    float* blk = e + k * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(blk[i]));
    const float sc = q4_block_scale(amax), inv = 1.0f / sc;  // a power of two (normal): exact
    for (int i = 0; i < 32; ++i)
      blk[i] = q4_sim_value(blk[i], inv, sc);
  }
}

// After compressor_finish_entry (attention compressor, h = 512): encodes the finished row e
// into entry `entry` of the FP8 cache (warp 0; exact, the row is Q8-simulated). Block-wide.
__device__ __forceinline__ void compressor_store_entry(const float* e, int64_t entry, uint8_t* cache) {
  __syncthreads();  // every thread's part of the finished row is written
  if (threadIdx.x < 32)
    kv_encode_entry_warp(e, cache + kv_cache_data_offset(entry), cache + kv_cache_scale_offset(entry),
                         int(threadIdx.x));
}

// After compressor_finish_entry (indexer): thread k stores channel k of the finished row e as
// bf16 bits into keys[entry·h + k] (exact: the row is FP4-simulated). Block-wide.
__device__ __forceinline__ void compressor_store_index_key(const float* e, int64_t entry, int h, uint16_t* keys) {
  __syncthreads();  // every thread's part of the finished row is written
  const int k = threadIdx.x;
  keys[entry * h + k] = uint16_t(__float_as_uint(e[k]) >> 16);
}

}  // namespace dsv4::gpu::detail
