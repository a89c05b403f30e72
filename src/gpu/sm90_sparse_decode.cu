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
// Per 64-candidate tile: dequant raw → Ks; S = Q·Kᵀ (warp w: heads 16·(w%4), cands 16·(w/4),
// mma m16n8k16, k = 512); online softmax per head (8 threads per head: block max, α = e^(m−m'),
// p = e^(s−m'), l = fma(l, α, Σp) with unrounded p, P rounded to bf16); O = α·O + P·V (warp w:
// heads 16·(w%4), dims 128·(w/4); B fragments via ldmatrix.trans). Warps skip 16-candidate
// slices beyond the tile's valid count, so short chunks cost little. Invalid (−1) candidates
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
static_assert(kMaxCluster * kHeads <= kHeads * kSS, "merge weights must fit in s");

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

// Candidates per split of a row with `total` candidates (SparseDecodePlan).
__device__ __forceinline__ int row_chunk(int total, int splits, int min_chunk, bool cluster_merge) {
  int chunk = ((total + splits - 1) / splits + 15) & ~15;
  if (!cluster_merge && chunk > kTile) chunk = (chunk + kTile - 1) & ~(kTile - 1);
  return max(chunk, min_chunk);
}

// Writes bf16-rounded v (2 values of head h, dims d, d+1) to the output row.
__device__ __forceinline__ void store_out2(const SparseDecodeArgs& a, int64_t at, float x, float y) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
  if (a.out_f32 != nullptr)
    *reinterpret_cast<float2*>(a.out_f32 + at) = __bfloat1622float2(v);
  else
    *reinterpret_cast<__nv_bfloat162*>(a.out + at) = v;
}

// In-cluster merge (the row's `splits` CTAs form one thread-block cluster, rank = split):
// every CTA stores its unnormalized O in its own smem (over q and k), the cluster barrier makes
// the partials and (m, l) visible, then CTA `split` merges the split-th slice of the row's
// H × 512 outputs reading all partials through distributed shared memory, in split order:
// M = max m_s, O = Σ e^(m_s−M) O_s / (Σ e^(m_s−M) l_s + e^(sink−M)) — the merge kernel's
// formula, without the global partials and the second launch. A second barrier keeps every
// CTA's smem alive until the cluster is done reading it.
// H: the CTA's heads (its head group), q_off / sink: where they start.
__device__ void cluster_merge_epilogue(Smem& sm, const SparseDecodeArgs& a, const float (&o)[16][4],
                                       int splits, int split, bool write_partial, int mt, int grp,
                                       int64_t q_off, int H, const float* __restrict__ sink) {
  const int tid = threadIdx.x, lane = tid & 31;
  float* part = reinterpret_cast<float*>(sm.q);  // [64][kPartS]
  const int h0 = mt * 16 + (lane >> 2), h1 = h0 + 8;
  if (write_partial) {
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int d = grp * 128 + n * 8 + (lane & 3) * 2;
      if (h0 < H) *reinterpret_cast<float2*>(part + h0 * kPartS + d) = make_float2(o[n][0], o[n][1]);
      if (h1 < H) *reinterpret_cast<float2*>(part + h1 * kPartS + d) = make_float2(o[n][2], o[n][3]);
    }
  }
  cg::cluster_group cl = cg::this_cluster();
  cl.sync();
  float* wgt = sm.s;  // [splits][64] weights e^(m_s − M)
  if (tid < H) {  // all remote (m, l) loads in flight at once (unrolled, predicated)
    float mv[kMaxCluster], lv[kMaxCluster];
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s)
      if (s < splits) {
        mv[s] = *cl.map_shared_rank(&sm.m[tid], s);
        lv[s] = *cl.map_shared_rank(&sm.l[tid], s);
      }
    float big = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s)
      if (s < splits) big = fmaxf(big, mv[s]);
    float l = 0.0f;
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s)
      if (s < splits) {
        const float w = mv[s] == -INFINITY ? 0.0f : __expf(mv[s] - big);
        wgt[s * kHeads + tid] = w;
        l = fmaf(w, lv[s], l);
      }
    sm.alpha[tid] = big == -INFINITY ? 0.0f : 1.0f / (l + __expf(sink[tid] - big));
  }
  __syncthreads();
  // This CTA's slice: float4 units [u0, u1) of the row's H × 128.
  const int units = H * (kHeadDim / 4), per = (units + splits - 1) / splits;
  const int u1 = min(units, (split + 1) * per);
  for (int u = split * per + tid; u < u1; u += kThreads) {
    const int h = u / (kHeadDim / 4), c = (u % (kHeadDim / 4)) * 4;
    float4 v[kMaxCluster];  // every split's partial in flight at once
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s)
      if (s < splits) v[s] = *reinterpret_cast<const float4*>(cl.map_shared_rank(part + h * kPartS + c, s));
    float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
    for (int s = 0; s < kMaxCluster; ++s) {
      const float w = s < splits ? wgt[s * kHeads + h] : 0.0f;
      if (w != 0.0f) {  // empty splits and heads without candidates hold no partial
        acc.x = fmaf(w, v[s].x, acc.x);
        acc.y = fmaf(w, v[s].y, acc.y);
        acc.z = fmaf(w, v[s].z, acc.z);
        acc.w = fmaf(w, v[s].w, acc.w);
      }
    }
    const float inv = sm.alpha[h];
    const int64_t at = q_off + h * kHeadDim + c;
    store_out2(a, at, acc.x * inv, acc.y * inv);
    store_out2(a, at + 2, acc.z * inv, acc.w * inv);
  }
  cl.sync();
}

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

  const int mt = warp & 3, grp = warp >> 2;
  const bool head_tile = mt < head_tiles;  // this warp's 16 heads hold real heads
  float o[16][4];
#pragma unroll
  for (int n = 0; n < 16; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

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

    // S = Q·Kᵀ: warp (mt, grp) → heads 16mt.., cands 16grp..; two k-halves for ILP.
    if (head_tile && grp * 16 < count) {
      float acc[2][2][4] = {};
      const __nv_bfloat16* qa = sm.q + (mt * 16 + (lane & 15)) * kQS + (lane >> 4) * 8;
      const __nv_bfloat16* kb =
          sm.k + (grp * 16 + (lane & 7) + ((lane >> 4) << 3)) * kQS + ((lane >> 3) & 1) * 8;
#pragma unroll 4
      for (int k0 = 0; k0 < kHeadDim / 2; k0 += 16) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int kk = k0 + half * (kHeadDim / 2);
          uint32_t af[4], bf[4];
          ldmatrix_x4(af, qa + kk);
          ldmatrix_x4(bf, kb + kk);
          mma_bf16(acc[half][0], af, bf[0], bf[1]);
          mma_bf16(acc[half][1], af, bf[2], bf[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int row = mt * 16 + (lane >> 2), col = grp * 16 + nt * 8 + (lane & 3) * 2;
        sm.s[row * kSS + col] = (acc[0][nt][0] + acc[1][nt][0]) * a.scale;
        sm.s[row * kSS + col + 1] = (acc[0][nt][1] + acc[1][nt][1]) * a.scale;
        sm.s[(row + 8) * kSS + col] = (acc[0][nt][2] + acc[1][nt][2]) * a.scale;
        sm.s[(row + 8) * kSS + col + 1] = (acc[0][nt][3] + acc[1][nt][3]) * a.scale;
      }
    }
    __syncthreads();

    // Online softmax: 8 threads per head, 8 candidates each.
    {
      const int h = tid >> 3, sub = tid & 7;
      float sv[8], bmax = -INFINITY;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = sub * 8 + i;
        const bool valid = sm.valid[c] != 0;
        sv[i] = valid ? sm.s[h * kSS + c] : -INFINITY;
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

    // O = α·O + P·V: warp (mt, grp) → heads 16mt.., dims 128grp..
    if (head_tile) {
      const float a0 = sm.alpha[mt * 16 + (lane >> 2)], a1 = sm.alpha[mt * 16 + (lane >> 2) + 8];
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        o[n][0] *= a0;
        o[n][1] *= a0;
        o[n][2] *= a1;
        o[n][3] *= a1;
      }
      const __nv_bfloat16* pa = sm.p + (mt * 16 + (lane & 15)) * kPS + (lane >> 4) * 8;
      const __nv_bfloat16* vb =
          sm.k + ((lane & 7) + ((lane >> 3) & 1) * 8) * kQS + grp * 128 + (lane >> 4) * 8;
      for (int c0 = 0; c0 < count; c0 += 16) {
        uint32_t af[4];
        ldmatrix_x4(af, pa + c0);
#pragma unroll
        for (int n2 = 0; n2 < 8; ++n2) {
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

  // Epilogue: rows lane/4 and lane/4+8 of head tile mt, dims grp·128 + 8n + 2(lane%4).
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
    for (int n = 0; n < 16; ++n) {
      const int d = grp * 128 + n * 8 + (lane & 3) * 2;
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
    for (int n = 0; n < 16; ++n) {
      const int d = grp * 128 + n * 8 + (lane & 3) * 2;
      if (h0 < H) *reinterpret_cast<float2*>(po + h0 * kHeadDim + d) = make_float2(o[n][0], o[n][1]);
      if (h1 < H) *reinterpret_cast<float2*>(po + h1 * kHeadDim + d) = make_float2(o[n][2], o[n][3]);
    }
  }
}

// Merge: one CTA of 128 threads per (row, head); thread i owns dims 4i..4i+3. The splits' m
// and l are read in parallel (threads stride over splits) and reduced in a fixed order, the
// weights e^(m_s − M) staged in smem, then the partials accumulated with several loads in
// flight (a dependent chain of one L2 round trip per split was the serial part).
__global__ void __launch_bounds__(128) merge_kernel(const __grid_constant__ SparseDecodeArgs a,
                                                    int splits, const float* __restrict__ ws) {
  __shared__ float w_s[kMaxSplits];
  __shared__ float red[4];
  pdl_wait();  // the split kernel's partials
  pdl_trigger();
  const int H = a.heads, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r = blockIdx.x / H, h = blockIdx.x % H;
  const float* ml = ws + int64_t(r) * splits * H * 2;
  const float* po = ws + int64_t(a.rows) * splits * H * 2 + int64_t(r) * splits * H * kHeadDim +
                    h * kHeadDim;
  float big = -INFINITY;
  for (int s = tid; s < splits; s += 128) big = fmaxf(big, ml[(s * H + h) * 2]);
  for (int off = 16; off > 0; off >>= 1) big = fmaxf(big, __shfl_xor_sync(~0u, big, off));
  if (lane == 0) red[warp] = big;
  __syncthreads();
  big = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  __syncthreads();  // red is reused below
  float l = 0.0f;
  for (int s = tid; s < splits; s += 128) {
    const float m = ml[(s * H + h) * 2];
    const float w = m == -INFINITY ? 0.0f : __expf(m - big);
    w_s[s] = w;
    l += w * ml[(s * H + h) * 2 + 1];
  }
  for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(~0u, l, off);
  if (lane == 0) red[warp] = l;
  __syncthreads();
  l = (red[0] + red[1]) + (red[2] + red[3]);
  float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll 8
  for (int s = 0; s < splits; ++s) {
    const float w = w_s[s];
    if (w != 0.0f) {  // empty splits wrote no partial
      const float4 v =
          *reinterpret_cast<const float4*>(po + int64_t(s) * H * kHeadDim + threadIdx.x * 4);
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
  }
  const float inv = big == -INFINITY ? 0.0f : 1.0f / (l + __expf(a.sink[h] - big));
  const int64_t at = (int64_t(r) * H + h) * kHeadDim + threadIdx.x * 4;
  const __nv_bfloat162 v0 = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  const __nv_bfloat162 v1 = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
  if (a.out_f32 != nullptr) {
    const float2 f0 = __bfloat1622float2(v0), f1 = __bfloat1622float2(v1);
    *reinterpret_cast<float4*>(a.out_f32 + at) = make_float4(f0.x, f0.y, f1.x, f1.y);
  } else {
    reinterpret_cast<__nv_bfloat162*>(a.out + at)[0] = v0;
    reinterpret_cast<__nv_bfloat162*>(a.out + at)[1] = v1;
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
    if (cudaFuncSetAttribute(sparse_decode_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess ||
        cudaFuncSetAttribute(sparse_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Smem)) !=
            cudaSuccess) {
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
      if (cudaOccupancyMaxActiveClusters(&n, sparse_decode_kernel, &cfg) != cudaSuccess) n = 0;
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
    CUDA_CHECK(cudaFuncSetAttribute(sparse_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Smem)));
    CUDA_CHECK(cudaFuncSetAttribute(sparse_decode_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
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
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, sparse_decode_kernel, a, p.splits, p.min_chunk, ws, cluster_merge,
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
