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
// Start: the row's lengths and, speculatively (for a row as long as the plan's bounds), the
// first tile's ids are loaded together (one dependent round trip less when the row is full);
// with one head tile the Q copy is issued first too. Per 64-candidate tile: dequant raw → Ks; S = Q·Kᵀ (mma m16n8k16; each score = two k-half
// chains added; work units spread over the warps and SM sub-partitions by the CTA's head tiles,
// qk_tile); online softmax per head (softmax_tile: 32 / 16 / 8 threads per head for NT 4 / 8 /
// 16; block max, α = e^(m−m'), p = e^(s−m'), l = fma(l, α, Σp) with unrounded p, P rounded to
// bf16); O = α·O + P·V (the
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
// (pdl_wait before any input is read). Row pieces: sm90_sparse_decode_rows.cuh; per-tile parts:
// sm90_sparse_decode_tile.cuh; merges: sm90_sparse_decode_merge.cuh. A probe instantiation (kProbe, sparse_decode_probe) stamps
// clock64 at the phase boundaries for the bench.
// Exactness: the reference groups candidates in 64-blocks from list start; splits of 8·k
// candidates regroup the online softmax, and tensor-core fp32 accumulation reorders sums, so
// outputs differ from cpu::sparse_attention_head at bf16-rounding level (tested tolerance in
// sparse_decode_test.cu). The dequantized K values themselves are exact.
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "base/check.h"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/kv_fp8.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_sparse_decode.cuh"
#include "gpu/sm90_sparse_decode_ws.cuh"
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
constexpr int kProbeSlots = 16;           // probe stamps per CTA (sparse_decode_probe)
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
  float2 ml[kHeads];  // (m, l) copies read by the in-cluster merge
  const uint8_t* src_data[kTile];  // nullptr = invalid candidate
  const uint8_t* src_scale[kTile];
  uint8_t valid[kTile];  // current tile (src_* already describe the prefetched one)
  long long stamp[kProbeSlots];  // the probe instantiation's clock64 stamps
};
// The in-cluster merge's partial O [64 heads][kPartS] fp32 reuses q and k (adjacent).
static_assert(offsetof(Smem, k) == offsetof(Smem, q) + sizeof(Smem::q) &&
                  kHeads * kPartS * sizeof(float) <= sizeof(Smem::q) + sizeof(Smem::k),
              "partial O must fit over q and k");
static_assert(3 * kMaxCluster * kHeads <= kHeads * kSS && 2 * kThreads >= kMaxCluster * kHeads,
              "merge weights and (m, l) copies must fit in s; two pairs per thread");

#include "gpu/sm90_sparse_decode_rows.cuh"  // RowList, row_list, resolve, spec_list_id, row_chunk, probe_mark
#include "gpu/sm90_sparse_decode_tile.cuh"  // gather_tile, load_q, dequant_tile, qk_tile

// Online softmax of a tile (scores in Ss: kQkParts<NT> k parts, rows kq·rows + head), T
// threads per head with C consecutive candidates each (NT 4 / 8 / 16: T = 32 / 16 / 8, so that
// one head tile fills the 16 warps; vector loads and stores without bank conflicts). Warps whose
// heads are all past `rows` skip. The arithmetic is the 8-threads-per-head form's, bit for bit:
// s = (part0 + part1)·scale, max, α = e^(m−m'), p = e^(s−m'), P = bf16(p); Σp = a sequential sum
// of each 8-candidate block (the block's lanes shuffle their p to the first), then a butterfly
// over the 8 blocks; l = fma(l, α, Σp).
template <int C>
__device__ __forceinline__ void load_floats(float (&v)[C], const float* p) {
  if constexpr (C == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x, v[1] = x.y;
  } else {
#pragma unroll
    for (int i = 0; i < C; i += 4) {
      const float4 x = *reinterpret_cast<const float4*>(p + i);
      v[i] = x.x, v[i + 1] = x.y, v[i + 2] = x.z, v[i + 3] = x.w;
    }
  }
}
template <int NT>
__device__ __forceinline__ void softmax_tile(Smem& sm, int head_tiles, float scale) {
  constexpr int C = NT / 2, T = kTile / C, G = 8 / C;  // G: lanes per 8-candidate block
  constexpr int kparts = kQkParts<NT>;
  const int tid = threadIdx.x, h = tid / T, t = tid % T, c0 = t * C;
  const int rows = head_tiles * 16;
  if ((tid & ~31) / T >= rows) return;  // the warp's heads are all past the CTA's tiles
  using VBits = std::conditional_t<C == 2, uint16_t, std::conditional_t<C == 4, uint32_t, uint64_t>>;
  const VBits valid = *reinterpret_cast<const VBits*>(sm.valid + c0);
  float s0[C], s1[C], sv[C], bmax = -INFINITY;
  load_floats<C>(s0, sm.s + h * kSS + c0);
  if constexpr (kparts == 2) load_floats<C>(s1, sm.s + (h + rows) * kSS + c0);
#pragma unroll
  for (int i = 0; i < C; ++i) {
    sv[i] = ((valid >> (8 * i)) & 0xff) == 0 ? -INFINITY : (kparts == 2 ? s0[i] + s1[i] : s0[i]) * scale;
    bmax = fmaxf(bmax, sv[i]);
  }
#pragma unroll
  for (int off = 1; off < T; off <<= 1) bmax = fmaxf(bmax, __shfl_xor_sync(~0u, bmax, off));
  const float m_old = sm.m[h];
  const float m_new = fmaxf(m_old, bmax);
  const bool none = m_new == -INFINITY;
  const float alpha = none ? 1.0f : __expf(m_old - m_new);
  float p[C];
  uint32_t pb[C / 2];
#pragma unroll
  for (int i = 0; i < C; ++i) p[i] = (none || sv[i] == -INFINITY) ? 0.0f : __expf(sv[i] - m_new);
#pragma unroll
  for (int i = 0; i < C / 2; ++i) pb[i] = pack_bf16x2(p[i * 2], p[i * 2 + 1]);
  __nv_bfloat16* pd = sm.p + h * kPS + c0;
  if constexpr (C == 2)
    *reinterpret_cast<uint32_t*>(pd) = pb[0];
  else if constexpr (C == 4)
    *reinterpret_cast<uint2*>(pd) = make_uint2(pb[0], pb[1]);
  else
    *reinterpret_cast<uint4*>(pd) = make_uint4(pb[0], pb[1], pb[2], pb[3]);
  // The block's sequential sum, in its first lane (the other lanes' sums are not used).
  float blk[8];
#pragma unroll
  for (int i = 0; i < C; ++i) blk[i] = p[i];
#pragma unroll
  for (int j = 1; j < G; ++j)
#pragma unroll
    for (int i = 0; i < C; ++i) blk[j * C + i] = __shfl_down_sync(~0u, p[i], j);
  float psum = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) psum += blk[i];
#pragma unroll
  for (int off = G; off < T; off <<= 1) psum += __shfl_xor_sync(~0u, psum, off);
  __syncwarp();
  if (t == 0) {
    sm.l[h] = fmaf(sm.l[h], alpha, psum);
    sm.m[h] = m_new;
    sm.alpha[h] = alpha;
  }
}

#include "gpu/sm90_sparse_decode_merge.cuh"  // store_out2, cluster_merge_tail, merge_kernel

// H: the CTA's heads (its head group), q_off / sink: where they start.
template <int NT, bool kProbe>
__device__ void cluster_merge_epilogue(Smem& sm, const SparseDecodeArgs& a, const float (&o)[NT][4],
                                       int splits, int split, bool write_partial, int mt, int grp,
                                       int64_t q_off, int H, const float* __restrict__ sink) {
  const int tid = threadIdx.x, lane = tid & 31;
  float* part = reinterpret_cast<float*>(sm.q);  // [64][kPartS]
  const int h0 = mt * 16 + (lane >> 2), h1 = h0 + 8;
  if (write_partial) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int d = grp * NT * 8 + n * 8 + (lane & 3) * 2;
      if (h0 < H) *reinterpret_cast<float2*>(part + h0 * kPartS + d) = make_float2(o[n][0], o[n][1]);
      if (h1 < H) *reinterpret_cast<float2*>(part + h1 * kPartS + d) = make_float2(o[n][2], o[n][3]);
    }
  }
  if (tid < kHeads) sm.ml[tid] = make_float2(sm.m[tid], sm.l[tid]);
  cg::cluster_group cl = cg::this_cluster();
  cl.sync();
  probe_mark<kProbe>(sm, 9);
  // This CTA's slice: float4 units [split·per, u1) of the row's H × 128.
  const int units = H * (kHeadDim / 4), per = (units + splits - 1) / splits;
  const int u1 = min(units, (split + 1) * per), u_first = split * per + tid;
  // The 4-tile kernel (B ≥ 8: several units per thread) has a variant per cluster size; the
  // one- and two-tile kernels (small batch, ≤ 2 units per thread) keep their code short.
  if (NT < 16 || splits == 16)
    cluster_merge_tail<16, kProbe>(sm, a, part, splits, u_first, u1, q_off, H, sink);
  else if (splits == 8)
    cluster_merge_tail<8, kProbe>(sm, a, part, 8, u_first, u1, q_off, H, sink);
  else if (splits == 4)
    cluster_merge_tail<4, kProbe>(sm, a, part, 4, u_first, u1, q_off, H, sink);
  else
    cluster_merge_tail<2, kProbe>(sm, a, part, 2, u_first, u1, q_off, H, sink);
  probe_mark<kProbe>(sm, 11);
  // Keep this CTA's smem until every CTA has read it. Relaxed: the reads above are complete
  // (their values are used), and the output stores need no cluster-scope ordering.
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
  asm volatile("barrier.cluster.wait;\n" ::: "memory");
  probe_mark<kProbe>(sm, 12);
}

// Launch parameters of sparse_decode_kernel, from the plan.
struct KernelParams {
  float* ws;          // merge-kernel partials (cluster == 1 and splits > 1)
  long long* probe;   // kProbe only: [grid][kSparseDecodeProbeSlots] clock64 stamps
  int splits, min_chunk, head_groups, group_tiles;
  int spec_main, spec_total;  // the plan's list bounds: speculative id loads (spec_total 0: off)
  bool cluster_merge;
};

template <int NT, bool kProbe, bool kIntDequant = false>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_decode_kernel(const __grid_constant__ SparseDecodeArgs a, const KernelParams kp) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  probe_mark<kProbe>(sm, 0);
  pdl_wait();  // q, pos, lists and pools come from earlier kernels
  pdl_trigger();
  probe_mark<kProbe>(sm, 1);
  const int splits = kp.splits, head_groups = kp.head_groups, group_tiles = kp.group_tiles;
  const bool cluster_merge = kp.cluster_merge;
  float* const ws = kp.ws;
  // CTA = (row r, head group, split); the group holds heads [h_base, h_base + H).
  const int split = blockIdx.x % splits, rg = blockIdx.x / splits;
  const int r = rg / head_groups, h_base = (rg % head_groups) * group_tiles * 16;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int H = min(a.heads - h_base, group_tiles * 16), head_tiles = (H + 15) >> 4;
  const int64_t q_off = (int64_t(r) * a.heads + h_base) * kHeadDim;
  // The row's lengths and the first tile's ids (speculatively: for a row as long as the plan's
  // bounds, loaded together with the lengths) are requested at once; with one head tile also
  // the bf16 Q (16 KB, cp.async). With 2–4 tiles (32–64 KB) Q first delays the lengths
  // (probe at B=8: +1.3 µs) and was 1.5–7% slower at B ≥ 8.
  constexpr bool kQFirst = NT == 4;
  const int spec_chunk = row_chunk(kp.spec_total, splits, kp.min_chunk, cluster_merge);
  int32_t spec_id = -1;
  if (tid < kTile && tid < spec_chunk && split * spec_chunk + tid < kp.spec_total)
    spec_id = spec_list_id(a, r, split * spec_chunk + tid, kp.spec_main);
  if (kQFirst && a.q_f32 == nullptr) load_q(sm, a, q_off, H, head_tiles);  // (also in an empty split)
  const RowList rl = row_list(a, r);
  const bool spec_hit = rl.main_len == kp.spec_main && rl.total == kp.spec_total;
  const int chunk = row_chunk(rl.total, splits, kp.min_chunk, cluster_merge);
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
    cp_async_wait_all();  // (Q)
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

  if (has_work) gather_tile(sm, a, rl, r, begin, min(kTile, end - begin), spec_hit, spec_id);
  probe_mark<kProbe>(sm, 2);
  // Otherwise Q after the first tile's gather is issued, so that both are in flight together
  // (an fp32 Q is converted by the threads: blocking loads).
  if ((!kQFirst || a.q_f32 != nullptr) && has_work) load_q(sm, a, q_off, H, head_tiles);
  cp_async_commit();  // Q and the first tile, waited for with the first tile
  if (tid < kHeads) {
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.0f;
  }
  for (int j0 = begin; j0 < end; j0 += kTile) {
    const int count = min(kTile, end - j0);
    const bool first = j0 == begin;  // (the probe stamps the first tile's phases)
    cp_async_wait_all();
    __syncthreads();
    if (first) probe_mark<kProbe>(sm, 3);
    dequant_tile<kIntDequant>(sm, count);
    __syncthreads();
    if (first) probe_mark<kProbe>(sm, 4);
    if (j0 + kTile < end)  // prefetch the next tile (raw and src_* are free now)
      gather_tile(sm, a, rl, r, j0 + kTile, min(kTile, end - j0 - kTile));

    // S = Q·Kᵀ over work units (head tile, 16-candidate group, k part), one per warp, spread
    // over the 4 SM sub-partitions (warp % 4); partial sums in Ss rows kq·16·head_tiles + head.
    qk_tile<NT>(sm, head_tiles, count);
    __syncthreads();
    if (first) probe_mark<kProbe>(sm, 5);

    // Online softmax per head (softmax_tile).
    softmax_tile<NT>(sm, head_tiles, a.scale);
    __syncthreads();
    if (first) probe_mark<kProbe>(sm, 6);

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
    if constexpr (kProbe) {
      __syncthreads();
      if (first) probe_mark<kProbe>(sm, 7);
    }
  }
  cp_async_wait_all();
  __syncthreads();
  probe_mark<kProbe>(sm, 8);

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
    cluster_merge_epilogue<NT, kProbe>(sm, a, o, splits, split, head_tile && has_work, mt, grp, q_off, H,
                                       a.sink + h_base);
    if constexpr (kProbe)
      if (tid == 0) probe_write(sm, kp.probe);
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

using KernelFn = void (*)(SparseDecodeArgs, KernelParams);
constexpr KernelFn kKernels[3][3] = {
    {sparse_decode_kernel<4, false>, sparse_decode_kernel<8, false>, sparse_decode_kernel<16, false>},
    {sparse_decode_kernel<4, true>, sparse_decode_kernel<8, true>, sparse_decode_kernel<16, true>},
    {sparse_decode_kernel<4, false, true>, sparse_decode_kernel<8, false, true>,
     sparse_decode_kernel<16, false, true>}};

// The instantiation for CTAs of up to `group_tiles` head tiles (all use the same smem and threads):
// the probe's, the integer dequantization's (DSV4_KV_DEQUANT=int only) or the plain one.
KernelFn kernel_for(int group_tiles, bool probe = false) {
  return kKernels[probe ? 1 : kv_dequant_mode() == KvDequant::kInt ? 2 : 0][group_tiles <= 1 ? 0 : group_tiles == 2 ? 1 : 2];
}

// Lets every instantiation use sizeof(Smem) and clusters of 16; false on failure.
bool set_kernel_attributes() {
  for (const auto& row : kKernels)
    for (KernelFn k : row)
      if (cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess ||
          cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Smem)) != cudaSuccess)
        return false;
  return true;
}

void launch(const SparseDecodeArgs& a, const SparseDecodePlan& p, void* workspace, long long* probe,
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
  DSV4_CHECK(p.chunk_align == (p.cluster > 1 ? 8 : 16), "sparse decode: chunk_align ", p.chunk_align,
             " with cluster ", p.cluster);
  if (p.warp_specialized) {  // many rows: sm90_sparse_decode_ws.cu
    sparse_decode_ws(a, p, workspace, probe, stream);
    return;
  }
  static std::once_flag attr_set[kMaxDevices];  // cudaFuncSetAttribute is per device
  call_once_per_device(attr_set, [] {
    DSV4_CHECK(set_kernel_attributes(), "sparse decode: cudaFuncSetAttribute failed");
  });
  KernelParams kp;
  kp.ws = static_cast<float*>(workspace);
  kp.probe = probe;
  kp.splits = p.splits;
  kp.min_chunk = p.min_chunk;
  kp.head_groups = p.head_groups;
  kp.group_tiles = p.group_tiles;
  kp.spec_main = p.max_main;
  kp.spec_total = p.max_main + p.max_extra;
  kp.cluster_merge = p.cluster > 1;
  cudaLaunchAttribute attr[2];  // PDL: not with the merge kernel (measured slower)
  const unsigned n_attr = cluster_pdl_attrs(attr, p.cluster, pdl_enabled() && (kp.cluster_merge || p.splits == 1));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(a.rows) * unsigned(p.head_groups) * unsigned(p.splits));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = sizeof(Smem);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel_for(p.group_tiles, probe != nullptr), a, kp));
  if (p.splits > 1 && !kp.cluster_merge) {
    merge_kernel<<<unsigned(a.rows) * unsigned(a.heads), 128, 0, stream>>>(a, p.splits, kp.ws);
    CUDA_CHECK_LAUNCH();
  }
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

KvDequant kv_dequant_mode() {
  static const KvDequant mode = [] {
    const char* e = std::getenv("DSV4_KV_DEQUANT");
    if (e == nullptr) return KvDequant::kAuto;
    DSV4_CHECK(std::strcmp(e, "int") == 0 || std::strcmp(e, "f32") == 0, "DSV4_KV_DEQUANT=", e,
               ": expected int or f32");
    return std::strcmp(e, "int") == 0 ? KvDequant::kInt : KvDequant::kF32;
  }();
  return mode;
}

void sparse_decode(const SparseDecodeArgs& a, const SparseDecodePlan& p, void* workspace,
                   cudaStream_t stream) {
  launch(a, p, workspace, nullptr, stream);
}

void sparse_decode_probe(const SparseDecodeArgs& a, const SparseDecodePlan& p, void* workspace,
                         long long* probe, cudaStream_t stream) {
  DSV4_CHECK(probe != nullptr, "sparse_decode_probe: no probe buffer");
  launch(a, p, workspace, probe, stream);
}

void kv_cache_insert(const float* kv, const int32_t* slots, int64_t n, const KvPool& pool,
                     cudaStream_t stream) {
  if (n == 0) return;
  insert_kernel<<<unsigned((n + 7) / 8), 256, 0, stream>>>(kv, slots, n, pool);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu::sm90
