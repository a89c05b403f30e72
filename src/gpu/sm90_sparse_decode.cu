// Split-K tensor-core sparse decode attention for sm_90a (spec §4.4, §5.4) over the 584-byte
// FP8 KV pool (§5.3), plus the cache-insert quantizer.
//
// Design. Grid = rows × splits; CTA (r, s) owns candidates [s·chunk_r, (s+1)·chunk_r) of row
// r's list (main part then extra part; chunk_r from the row's own length, see SparseDecodePlan)
// and all the row's heads (≤ 64; head tiles of 16 past `heads` are skipped, padded heads
// inside the last tile have zero queries and are never written), so every KV entry is gathered and
// dequantized once for the 64 heads. 512 threads (16 warps), one CTA per SM (≈ 196 KB smem):
//   Qs  [64 heads][520] bf16  the row's queries (loaded once per CTA)
//   Ks  [64 cands][520] bf16  dequantized K = V tile
//   raw [64 × 576 B data | 64 × 8 B scales]  cp.async staging of the next tile (prefetch
//       overlaps the current tile's math)
//   Ss  [64][68] fp32 scores, Ps [64][72] bf16 probabilities, m/l/alpha per head.
// Per 64-candidate tile: dequant raw → Ks; S = Q·Kᵀ (mma m16n8k16; each score = two k-half
// chains added; work units spread over the warps and SM sub-partitions by the CTA's head tiles,
// qk_tile); online softmax per head (8 threads per head: block max, α = e^(m−m'),
// p = e^(s−m'), l = fma(l, α, Σp) with unrounded p, P rounded to bf16); O = α·O + P·V (the
// kernel instantiation NT = 16 / 8 / 4 for CTAs of ≤ 4 / 2 / 1 head tiles gives each warp
// 8·NT dims of one tile, so all 16 warps work with one tile; B fragments via ldmatrix.trans).
// Units past the tile's valid count are skipped, so short chunks cost little. Invalid (−1) candidates
// get s = −inf, p = 0 and a zero K row. With one split the CTA writes bf16 output directly
// (sink in the final denominator only); otherwise it writes fp32 (m, l, O) partials and a merge
// kernel combines them: M = max m_s, O = Σ e^(m_s−M) O_s / (Σ e^(m_s−M) l_s + e^(sink−M)).
// Short lists (≤ 128 candidates per CTA, the decode case) run the row's splits as one
// thread-block cluster (≤ 16 CTAs) instead: each CTA keeps its partial O in its own smem and
// the cluster merges through distributed shared memory with the same formula, in split order
// (cluster_merge_epilogue) — one launch, no global partials. Both kernels are PDL-launched
// (pdl_wait before any input is read).
// Exactness: the reference groups candidates in 64-blocks from list start; splits of 16·k
// candidates regroup the online softmax, and tensor-core fp32 accumulation reorders sums, so
// outputs differ from cpu::sparse_attention_head at bf16-rounding level (tested tolerance in
// sparse_decode_test.cu). The dequantized K values themselves are exact.
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>
#include <cstddef>

#include "base/check.h"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/kv_fp8.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_sparse_decode.cuh"
#include "gpu/sparse_decode.h"

namespace dsv4::gpu::sm90 {
namespace {

constexpr int kThreads = 512;
constexpr int kTile = 64;
constexpr int kQS = kHeadDim + 8;  // bf16 row stride of Qs / Ks (1040 B: conflict-free ldmatrix)
constexpr int kSS = kTile + 4;     // fp32 row stride of Ss
constexpr int kPS = kTile + 8;     // bf16 row stride of Ps
constexpr int kChunks = kEntryData / 16;  // 36 16-byte pieces per entry
constexpr int kPartS = kQS;               // fp32 row stride of the in-smem partial O
static_assert(kTile == kSplitTile, "the plan's tile");
namespace cg = cooperative_groups;

struct Smem {
  __nv_bfloat16 q[kHeads * kQS];
  __nv_bfloat16 k[kTile * kQS];
  uint8_t raw[kTile * kEntryData];
  uint8_t raw_scales[kTile * kEntryScales];
  float s[kHeads * kSS];
  __nv_bfloat16 p[kHeads * kPS];
  float m[kHeads], l[kHeads], alpha[kHeads];
  const uint8_t* src_data[kTile];  // nullptr = invalid candidate
  const uint8_t* src_scale[kTile];
  uint8_t valid[kTile];  // current tile (src_* already describe the prefetched one)
};
// The in-cluster merge's partial O [64 heads][kPartS] fp32 reuses q and k (adjacent).
static_assert(offsetof(Smem, k) == offsetof(Smem, q) + sizeof(Smem::q) &&
                  kHeads * kPartS * sizeof(float) <= sizeof(Smem::q) + sizeof(Smem::k),
              "partial O must fit over q and k");
static_assert(3 * kMaxCluster * kHeads <= kHeads * kSS && 2 * kThreads >= kMaxCluster * kHeads,
              "merge weights and (m, l) copies must fit in s; two pairs per thread");

// The row's list: lengths and pool bases (per-row buffers in decode mode).
struct RowList {
  int main_len, total, first;
  const uint8_t* main_base;
  const uint8_t* extra_base;
};

__device__ __forceinline__ RowList row_list(const SparseDecodeArgs& a, int r) {
  RowList l;
  const int pos = a.pos != nullptr ? a.pos[r] : 0;
  l.main_len = a.main_idx != nullptr ? a.main_len[r] : min(pos + 1, a.win);
  l.first = max(0, pos - a.win + 1);
  int extra = 0;
  if (a.extra_idx != nullptr)
    extra = a.extra_len[r];
  else if (a.extra_ratio > 0)
    extra = (pos + 1) / a.extra_ratio;
  l.total = l.main_len + extra;
  l.main_base = a.caches != nullptr ? a.caches[r].window : a.main_pool.base;
  l.extra_base = a.caches != nullptr ? a.caches[r].comp.cache : a.extra_pool.base;
  return l;
}

// Resolves list position j of row r to the entry's data/scale addresses (nullptr: invalid).
__device__ __forceinline__ void resolve(const SparseDecodeArgs& a, const RowList& rl, int r, int j,
                                        const uint8_t*& data, const uint8_t*& sc) {
  data = nullptr;
  sc = nullptr;
  if (j >= rl.total) return;
  const KvPool* pool;
  const uint8_t* base;
  int32_t id;
  if (j < rl.main_len) {
    pool = &a.main_pool;
    base = rl.main_base;
    id = a.main_idx != nullptr     ? a.main_idx[int64_t(r) * a.main_stride + j]
         : a.window_origin >= 0 ? rl.first + j - a.window_origin
                                : (rl.first + j) % a.win;
  } else {
    pool = &a.extra_pool;
    base = rl.extra_base;
    const int c = j - rl.main_len;
    id = a.extra_idx != nullptr ? a.extra_idx[int64_t(r) * a.extra_stride + c] : c;
  }
  if (id < 0) return;
  data = base + kv_data_offset(*pool, id);
  sc = base + kv_scale_offset(*pool, id);
}

// Resolves tile candidates [j0, j0+64) (threads < 64), then issues their cp.async copies.
__device__ void gather_tile(Smem& sm, const SparseDecodeArgs& a, const RowList& rl, int r, int j0,
                            int count) {
  const int t = threadIdx.x;
  if (t < kTile) {
    const uint8_t *d, *s;
    resolve(a, rl, r, t < count ? j0 + t : rl.total, d, s);
    sm.src_data[t] = d;
    sm.src_scale[t] = s;
  }
  __syncthreads();
  for (int i = t; i < count * kChunks; i += kThreads) {
    const int c = i / kChunks, ch = i - c * kChunks;
    const uint8_t* src = sm.src_data[c];
    if (src != nullptr) cp_async16(sm.raw + c * kEntryData + ch * 16, src + ch * 16);
  }
  if (t < count && sm.src_scale[t] != nullptr)
    cp_async8(sm.raw_scales + t * kEntryScales, sm.src_scale[t]);
  cp_async_commit();
}

// raw → Ks for candidates [0, round_up(count, 16)); invalid or padding rows become zeros.
__device__ void dequant_tile(Smem& sm, int count) {
  const int padded = (count + 15) & ~15;
  if (threadIdx.x < kTile)
    sm.valid[threadIdx.x] = threadIdx.x < count && sm.src_data[threadIdx.x] != nullptr;
  for (int i = threadIdx.x; i < padded * kChunks; i += kThreads) {
    const int c = i / kChunks, ch = i - c * kChunks;
    uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
    const bool valid = c < count && sm.src_data[c] != nullptr;
    __nv_bfloat16* dst = sm.k + c * kQS;
    if (ch < 28) {  // 16 fp8 codes of tile ch/4
      if (valid) {
        const uint4 v = *reinterpret_cast<const uint4*>(sm.raw + c * kEntryData + ch * 16);
        const float scale = e8m0_to_float(sm.raw_scales[c * kEntryScales + ch / 4]);
        const uint2 a = dequant_e4m3x4(v.x, scale), b = dequant_e4m3x4(v.y, scale);
        const uint2 e = dequant_e4m3x4(v.z, scale), f = dequant_e4m3x4(v.w, scale);
        lo = make_uint4(a.x, a.y, b.x, b.y);
        hi = make_uint4(e.x, e.y, f.x, f.y);
      }
      *reinterpret_cast<uint4*>(dst + ch * 16) = lo;
      *reinterpret_cast<uint4*>(dst + ch * 16 + 8) = hi;
    } else {  // 8 bf16 rope dims
      if (valid) lo = *reinterpret_cast<const uint4*>(sm.raw + c * kEntryData + ch * 16);
      *reinterpret_cast<uint4*>(dst + kNopeDim + (ch - 28) * 8) = lo;
    }
  }
}

// The QK dot of a (head, candidate) is two fp32 chains over the k halves [0, 256) and
// [256, 512) (16 mma k-steps each, k ascending), added as half0 + half1, then scaled — the same
// bits whichever warp computes it, so head groups only move the arithmetic. K parts per work
// unit: 2 (a unit computes one half; the softmax adds them) in the kernels for CTAs of ≤ 2 head
// tiles (NT 4, 8), else 1.
template <int NT>
constexpr int kQkParts = NT == 16 ? 1 : 2;

// One unit: 16 heads of tile mt × 8·NN candidates from c0 × k halves [hf, hf + HALVES); stores
// the unscaled sum of its halves to Ss rows row0 + head.
template <int NN, int HALVES>
__device__ __forceinline__ void qk_unit(Smem& sm, int mt, int c0, int hf, int row0) {
  const int lane = threadIdx.x & 31;
  float acc[HALVES][NN][4] = {};
  const __nv_bfloat16* qa = sm.q + (mt * 16 + (lane & 15)) * kQS + (lane >> 4) * 8 + hf * 256;
  if constexpr (NN == 2) {  // B: 16 candidates × k16 per ldmatrix_x4
    const __nv_bfloat16* kb =
        sm.k + (c0 + (lane & 7) + ((lane >> 4) << 3)) * kQS + ((lane >> 3) & 1) * 8 + hf * 256;
#pragma unroll 4
    for (int k0 = 0; k0 < 256; k0 += 16) {
#pragma unroll
      for (int half = 0; half < HALVES; ++half) {
        uint32_t af[4], bf[4];
        ldmatrix_x4(af, qa + half * 256 + k0);
        ldmatrix_x4(bf, kb + half * 256 + k0);
        mma_bf16(acc[half][0], af, bf[0], bf[1]);
        mma_bf16(acc[half][1], af, bf[2], bf[3]);
      }
    }
  } else {  // B: 8 candidates × k32 (two k-steps) per ldmatrix_x4
    const __nv_bfloat16* kb = sm.k + (c0 + (lane & 7)) * kQS + (lane >> 3) * 8 + hf * 256;
#pragma unroll 4
    for (int k0 = 0; k0 < 256; k0 += 32) {
      uint32_t a0[4], a1[4], bf[4];
      ldmatrix_x4(a0, qa + k0);
      ldmatrix_x4(a1, qa + k0 + 16);
      ldmatrix_x4(bf, kb + k0);
      mma_bf16(acc[0][0], a0, bf[0], bf[1]);
      mma_bf16(acc[0][0], a1, bf[2], bf[3]);
    }
  }
#pragma unroll
  for (int nt = 0; nt < NN; ++nt) {
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = HALVES == 2 ? acc[0][nt][e] + acc[HALVES - 1][nt][e] : acc[0][nt][e];
    const int row = row0 + (lane >> 2), col = c0 + nt * 8 + (lane & 3) * 2;
    *reinterpret_cast<float2*>(sm.s + row * kSS + col) = make_float2(v[0], v[1]);
    *reinterpret_cast<float2*>(sm.s + (row + 8) * kSS + col) = make_float2(v[2], v[3]);
  }
}

// S partials of the tile, one unit per warp; consecutive warps (→ the four SM sub-partitions)
// take different units. Units past `count` are skipped. Two parts: Ss rows kq·16·head_tiles + head.
//   NT 16:        (tile w % tiles, 16 candidates w / tiles, both halves);
//   2 tiles (NT 8): (half w % 2, tile w / 2 % 2, 16 candidates w / 4);
//   1 tile (NT 4, 8): (half w % 2, 8 candidates w / 2).
template <int NT>
__device__ __forceinline__ void qk_tile(Smem& sm, int head_tiles, int count) {
  const int warp = threadIdx.x >> 5;
  if constexpr (NT == 16) {
    const int mt = warp % head_tiles, cg = warp / head_tiles;
    if (cg < kTile / 16 && cg * 16 < count) qk_unit<2, 2>(sm, mt, cg * 16, 0, mt * 16);
  } else if (NT == 4 || head_tiles == 1) {
    const int kq = warp & 1, c0 = (warp >> 1) * 8;
    if (c0 < count) qk_unit<1, 1>(sm, 0, c0, kq, kq * 16);
  } else {
    const int kq = warp & 1, mt = (warp >> 1) & 1, c0 = (warp >> 2) * 16;
    if (c0 < count) qk_unit<2, 1>(sm, mt, c0, kq, kq * 32 + mt * 16);
  }
}

// Candidates per split of a row with `total` candidates (SparseDecodePlan).
__device__ __forceinline__ int row_chunk(int total, int splits, int min_chunk, bool cluster_merge) {
  int chunk = ((total + splits - 1) / splits + 15) & ~15;
  if (!cluster_merge && chunk > kTile) chunk = (chunk + kTile - 1) & ~(kTile - 1);
  return max(chunk, min_chunk);
}

#include "gpu/sm90_sparse_decode_merge.cuh"  // store_out2, cluster_merge_epilogue, merge_kernel

template <int NT>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_decode_kernel(const __grid_constant__ SparseDecodeArgs a, int splits, int min_chunk,
                         float* __restrict__ ws, bool cluster_merge, int head_groups,
                         int group_tiles) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  pdl_wait();  // q, pos, lists and pools come from earlier kernels
  pdl_trigger();
  // CTA = (row r, head group, split); the group holds heads [h_base, h_base + H).
  const int split = blockIdx.x % splits, rg = blockIdx.x / splits;
  const int r = rg / head_groups, h_base = (rg % head_groups) * group_tiles * 16;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int H = min(a.heads - h_base, group_tiles * 16), head_tiles = (H + 15) >> 4;
  const RowList rl = row_list(a, r);
  const int chunk = row_chunk(rl.total, splits, min_chunk, cluster_merge);
  const int begin = split * chunk;
  const int end = min(rl.total, begin + chunk);
  // ws (merge kernel; one head group): [rows·splits][H] × (m, l) then [rows·splits][H][512] O.
  const int64_t unit = int64_t(r) * splits + split;
  float* ml = ws + unit * H * 2;
  const bool has_work = begin < end;
  if (!has_work && splits > 1 && !cluster_merge) {  // an empty partial (the merge skips it)
    for (int h = tid; h < H; h += kThreads) {
      ml[h * 2] = -INFINITY;
      ml[h * 2 + 1] = 0.0f;
    }
    return;
  }

  // P·V and the epilogue: warp → head tile mt, dims 8·NT·grp.. With 4 tiles sub-partition
  // warp % 4 takes tile warp % 4; with 1–2 tiles a tile's warps are consecutive (spread over
  // the four sub-partitions).
  constexpr int kWarpsPerTile = 64 / NT;
  const int mt = NT == 16 ? warp & 3 : warp / kWarpsPerTile;
  const int grp = NT == 16 ? warp >> 2 : warp % kWarpsPerTile;
  const bool head_tile = mt < head_tiles;  // this warp's 16 heads hold real heads
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  if (has_work) gather_tile(sm, a, rl, r, begin, min(kTile, end - begin));
  // Q → smem (heads × 512 bf16; rows up to the 16-head tile boundary zero-padded), issued
  // after the first tile's gather so both are in flight together.
  const int64_t q_off = (int64_t(r) * a.heads + h_base) * kHeadDim;
  if (!has_work) {
    // An empty split of a cluster: no Q (its partial is skipped by the merge).
  } else if (a.q_f32 == nullptr) {
    for (int i = tid; i < H * kHeadDim / 8; i += kThreads) {  // all in flight at once
      const int h = i / (kHeadDim / 8), c = i % (kHeadDim / 8);
      cp_async16(sm.q + h * kQS + c * 8, a.q + q_off + h * kHeadDim + c * 8);
    }
  } else {
#pragma unroll 4
    for (int i = tid; i < H * kHeadDim / 8; i += kThreads) {
      const int h = i / (kHeadDim / 8), c = i % (kHeadDim / 8);
      const float4* src = reinterpret_cast<const float4*>(a.q_f32 + q_off + h * kHeadDim + c * 8);
      const float4 x = src[0], y = src[1];
      *reinterpret_cast<uint4*>(sm.q + h * kQS + c * 8) =
          make_uint4(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w), pack_bf16x2(y.x, y.y),
                     pack_bf16x2(y.z, y.w));
    }
  }
  for (int i = H * kHeadDim / 8 + tid; has_work && i < head_tiles * 16 * kHeadDim / 8; i += kThreads) {
    const int h = i / (kHeadDim / 8), c = i % (kHeadDim / 8);
    *reinterpret_cast<uint4*>(sm.q + h * kQS + c * 8) = make_uint4(0, 0, 0, 0);
  }
  cp_async_commit();  // waited for with the first tile
  if (tid < kHeads) {
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.0f;
  }
  for (int j0 = begin; j0 < end; j0 += kTile) {
    const int count = min(kTile, end - j0);
    cp_async_wait_all();
    __syncthreads();
    dequant_tile(sm, count);
    __syncthreads();
    if (j0 + kTile < end)  // prefetch the next tile (raw and src_* are free now)
      gather_tile(sm, a, rl, r, j0 + kTile, min(kTile, end - j0 - kTile));

    // S = Q·Kᵀ over work units (head tile, 16-candidate group, k part), one per warp, spread
    // over the 4 SM sub-partitions (warp % 4); partial sums in Ss rows kq·16·head_tiles + head.
    qk_tile<NT>(sm, head_tiles, count);
    __syncthreads();

    // Online softmax: 8 threads per head, 8 candidates each; s = (Σ k parts in order)·scale.
    {
      const int h = tid >> 3, sub = tid & 7;
      constexpr int kparts = kQkParts<NT>;
      const int rows = head_tiles * 16;
      const bool live = h < rows;
      float sv[8], bmax = -INFINITY;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = sub * 8 + i;
        sv[i] = -INFINITY;
        if (live && sm.valid[c] != 0) {
          const float* sc = sm.s + h * kSS + c;
          sv[i] = (kparts == 2 ? sc[0] + sc[rows * kSS] : sc[0]) * a.scale;
        }
        bmax = fmaxf(bmax, sv[i]);
      }
      for (int off = 1; off < 8; off <<= 1) bmax = fmaxf(bmax, __shfl_xor_sync(~0u, bmax, off));
      const float m_old = sm.m[h];
      const float m_new = fmaxf(m_old, bmax);
      const bool none = m_new == -INFINITY;
      const float alpha = none ? 1.0f : __expf(m_old - m_new);
      float psum = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float p = (none || sv[i] == -INFINITY) ? 0.0f : __expf(sv[i] - m_new);
        psum += p;
        sm.p[h * kPS + sub * 8 + i] = __float2bfloat16_rn(p);
      }
      for (int off = 1; off < 8; off <<= 1) psum += __shfl_xor_sync(~0u, psum, off);
      __syncwarp();
      if (sub == 0) {
        sm.l[h] = fmaf(sm.l[h], alpha, psum);
        sm.m[h] = m_new;
        sm.alpha[h] = alpha;
      }
    }
    __syncthreads();

    // O = α·O + P·V: warp (mt, grp) → heads 16mt.., dims 8·NT·grp..
    if (head_tile) {
      const float a0 = sm.alpha[mt * 16 + (lane >> 2)], a1 = sm.alpha[mt * 16 + (lane >> 2) + 8];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        o[n][0] *= a0;
        o[n][1] *= a0;
        o[n][2] *= a1;
        o[n][3] *= a1;
      }
      const __nv_bfloat16* pa = sm.p + (mt * 16 + (lane & 15)) * kPS + (lane >> 4) * 8;
      const __nv_bfloat16* vb =
          sm.k + ((lane & 7) + ((lane >> 3) & 1) * 8) * kQS + grp * NT * 8 + (lane >> 4) * 8;
      for (int c0 = 0; c0 < count; c0 += 16) {
        uint32_t af[4];
        ldmatrix_x4(af, pa + c0);
#pragma unroll
        for (int n2 = 0; n2 < NT / 2; ++n2) {
          uint32_t bf[4];
          ldmatrix_x4_trans(bf, vb + c0 * kQS + n2 * 16);
          mma_bf16(o[2 * n2], af, bf[0], bf[1]);
          mma_bf16(o[2 * n2 + 1], af, bf[2], bf[3]);
        }
      }
    }
  }
  cp_async_wait_all();
  __syncthreads();

  // Epilogue: rows lane/4 and lane/4+8 of head tile mt, dims 8·NT·grp + 8n + 2(lane%4).
  const int h0 = mt * 16 + (lane >> 2), h1 = h0 + 8;
  if (splits == 1) {
    if (!head_tile) return;
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int h = i ? h1 : h0;
      const float m = sm.m[h];
      inv[i] = h >= H || m == -INFINITY ? 0.0f : 1.0f / (sm.l[h] + __expf(a.sink[h_base + h] - m));
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int d = grp * NT * 8 + n * 8 + (lane & 3) * 2;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int h = i ? h1 : h0;
        if (h >= H) continue;
        const __nv_bfloat162 v = __floats2bfloat162_rn(o[n][2 * i] * inv[i], o[n][2 * i + 1] * inv[i]);
        const int64_t at = q_off + h * kHeadDim + d;
        if (a.out_f32 != nullptr)
          *reinterpret_cast<float2*>(a.out_f32 + at) = __bfloat1622float2(v);
        else
          *reinterpret_cast<__nv_bfloat162*>(a.out + at) = v;
      }
    }
  } else if (cluster_merge) {
    cluster_merge_epilogue(sm, a, o, splits, split, head_tile && has_work, mt, grp, q_off, H, a.sink + h_base);
  } else {
    float* po = ws + int64_t(a.rows) * splits * H * 2 + unit * H * kHeadDim;
    if (tid < H) {
      ml[tid * 2] = sm.m[tid];
      ml[tid * 2 + 1] = sm.l[tid];
    }
    if (!head_tile) return;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int d = grp * NT * 8 + n * 8 + (lane & 3) * 2;
      if (h0 < H) *reinterpret_cast<float2*>(po + h0 * kHeadDim + d) = make_float2(o[n][0], o[n][1]);
      if (h1 < H) *reinterpret_cast<float2*>(po + h1 * kHeadDim + d) = make_float2(o[n][2], o[n][3]);
    }
  }
}

// Cache insert: one warp per entry (the shared FP8 encoder, kv_fp8.cuh).
__global__ void insert_kernel(const float* __restrict__ kv, const int32_t* __restrict__ slots,
                              int64_t n, KvPool pool) {
  const int64_t e = int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
  if (e >= n || slots[e] < 0) return;
  kv_encode_entry_warp(kv + e * kHeadDim, pool.base + kv_data_offset(pool, slots[e]),
                       pool.base + kv_scale_offset(pool, slots[e]), int(threadIdx.x & 31));
}

using KernelFn = void (*)(SparseDecodeArgs, int, int, float*, bool, int, int);
constexpr KernelFn kKernels[3] = {sparse_decode_kernel<4>, sparse_decode_kernel<8>, sparse_decode_kernel<16>};

// The instantiation for CTAs of up to `group_tiles` head tiles (all use the same smem and threads).
KernelFn kernel_for(int group_tiles) { return kKernels[group_tiles <= 1 ? 0 : group_tiles == 2 ? 1 : 2]; }

// Lets every instantiation use sizeof(Smem) and clusters of 16; false on failure.
bool set_kernel_attributes() {
  for (KernelFn k : kKernels)
    if (cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess ||
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Smem)) != cudaSuccess)
      return false;
  return true;
}

}  // namespace

int sparse_decode_cluster_capacity(int cluster) {
  static std::once_flag once[kMaxDevices];
  static int capacity[kMaxDevices][5];  // cluster sizes 1, 2, 4, 8, 16
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    (void)cudaGetLastError();
    return 0;
  }
  call_once_per_device(once, [&] {
    if (!set_kernel_attributes()) {
      (void)cudaGetLastError();
      return;
    }
    for (int i = 0; i < 5; ++i) {
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = 1u << i;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(1u << i);
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = sizeof(Smem);
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      int n = 0;
      if (cudaOccupancyMaxActiveClusters(&n, kernel_for(4), &cfg) != cudaSuccess) n = 0;
      (void)cudaGetLastError();
      capacity[dev][i] = n;
    }
  });
  int i = 0;
  while (i < 4 && (1 << i) < cluster) ++i;
  return (1 << i) == cluster ? capacity[dev][i] : 0;
}

void sparse_decode(const SparseDecodeArgs& a, const SparseDecodePlan& p, void* workspace,
                   cudaStream_t stream) {
  if (a.rows == 0) return;
  DSV4_CHECK(a.rows == p.rows && a.heads == p.heads, "plan built for ", p.rows, " rows × ", p.heads,
             " heads, called with ", a.rows, " × ", a.heads);
  DSV4_CHECK(p.splits == 1 || workspace != nullptr, "split-K needs a workspace");
  DSV4_CHECK((a.q != nullptr) != (a.q_f32 != nullptr) && (a.out != nullptr) != (a.out_f32 != nullptr),
             "sparse decode: exactly one of q / q_f32 and of out / out_f32");
  DSV4_CHECK(a.main_idx != nullptr || (a.pos != nullptr && a.win > 0), "sparse decode: no main list");
  DSV4_CHECK(a.extra_idx != nullptr || a.extra_ratio == 0 || a.pos != nullptr, "sparse decode: HCA list needs pos");
  DSV4_CHECK(p.cluster == 1 || (p.cluster == p.splits && p.cluster <= kMaxCluster),
             "sparse decode: cluster ", p.cluster, " for ", p.splits, " splits");
  DSV4_CHECK(p.head_groups >= 1 && p.head_groups * p.group_tiles * 16 >= a.heads &&
                 (p.head_groups == 1 || p.cluster > 1 || p.splits == 1),
             "sparse decode: ", p.head_groups, " head groups of ", p.group_tiles, " tiles");
  static std::once_flag attr_set[kMaxDevices];  // cudaFuncSetAttribute is per device
  call_once_per_device(attr_set, [] {
    DSV4_CHECK(set_kernel_attributes(), "sparse decode: cudaFuncSetAttribute failed");
  });
  float* ws = static_cast<float*>(workspace);
  const bool cluster_merge = p.cluster > 1;
  cudaLaunchAttribute attr[2];
  unsigned n_attr = 0;
  if (cluster_merge) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = unsigned(p.cluster);
    attr[n_attr].val.clusterDim.y = 1;
    attr[n_attr].val.clusterDim.z = 1;
    ++n_attr;
  }
  if (pdl_enabled() && (cluster_merge || p.splits == 1)) {  // (measured slower with the merge kernel)
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr].val.programmaticStreamSerializationAllowed = 1;
    ++n_attr;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(a.rows) * unsigned(p.head_groups) * unsigned(p.splits));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = sizeof(Smem);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel_for(p.group_tiles), a, p.splits, p.min_chunk, ws, cluster_merge,
                                p.head_groups, p.group_tiles));
  if (p.splits > 1 && !cluster_merge) {
    merge_kernel<<<unsigned(a.rows) * unsigned(a.heads), 128, 0, stream>>>(a, p.splits, ws);
    CUDA_CHECK_LAUNCH();
  }
}

void kv_cache_insert(const float* kv, const int32_t* slots, int64_t n, const KvPool& pool,
                     cudaStream_t stream) {
  if (n == 0) return;
  insert_kernel<<<unsigned((n + 7) / 8), 256, 0, stream>>>(kv, slots, n, pool);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu::sm90
