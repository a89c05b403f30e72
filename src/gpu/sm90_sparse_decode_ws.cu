// Warp-specialized sm_90a sparse decode attention for many rows (plan.warp_specialized; spec
// §4.4, §5.3, §5.4). Same arguments, plan, split rule and merges as sm90_sparse_decode.cu,
// whose header states the numerics contract this kernel keeps.
//
// Design. Grid = rows × splits; CTA (r, s) owns candidates [s·chunk_r, (s+1)·chunk_r) of row
// r's list for all the row's heads (≤ 64, one 64-row wgmma M tile; rows past `heads` hold zero
// queries and are never written). 384 threads = 3 warpgroups:
//   WG0, producer: lanes 2i, 2i + 1 of warp w gather candidate 16w + i of each 64-candidate
//     tile, one 16-byte half each of its 18 32-byte pairs (so a load reads 16 whole sectors) and
//     its 8 scale bytes (ld.global.nc), dequantize to bf16 and store the K = V tile into one of
//     two smem stages (core-matrix layout, sm90_sparse_decode_ws.cuh), zero rows for −1 /
//     padding candidates, a valid flag per candidate; mbarriers full[stage] / empty[stage]. Tile
//     t + 1's loads are issued piece by piece as tile t's pieces are stored (one register
//     share), unpredicated (invalid candidates read g_zero_entry), each tile's list ids two
//     tiles before its data.
//   WG1, WG2, consumers c = 0, 1: S_c = Q·K_cᵀ over candidates [32c, 32c + 32) of the tile
//     (wgmma m64n32k16 × 32, Q in smem); online softmax per head with the row max and the P sum
//     exchanged between the two warpgroups through smem (named barrier 2); P (bf16) to smem;
//     O_c = α·O_c + P·V over all 64 candidates for dims [256c, 256c + 256) (wgmma m64n256k16 × 4,
//     V = the same smem tile, MN-major; the α product skipped when a warp's α are all 1). O_c
//     stays in registers (128 fp32 per thread).
//   setmaxnreg: producer 120 registers, consumers 184.
// Epilogue (all threads): one split → bf16 output; in-cluster merge → partial O in smem (over Q
// and the K stages) and the shared cluster_merge_tail; else fp32 partials and merge_kernel.
// Numerics: s = (q·k)·scale with fp32 tensor-core accumulation over the 512 dims, m = running
// max, p = e^(s − m) (unrounded into l = fma(l, α, Σ_c0 p + Σ_c1 p)), P rounded to bf16 before
// P·V, the sink in the merge: tolerance-equal to cpu::sparse_attention_head like the mma.sync
// kernel (not bit-equal to it); deterministic, a function of the row's inputs and the plan.
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>
#include <cstddef>
#include <mutex>

#include "base/check.h"
#include "base/env.h"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/kv_fp8.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_sparse_decode.cuh"
#include "gpu/sm90_sparse_decode_ws.cuh"
#include "gpu/sparse_decode.h"

namespace dsv4::gpu::sm90 {
namespace {

constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kTile = 64;
constexpr int kStages = 2;
constexpr int kTileElems = kTile * kHeadDim;  // bf16 per K tile (64 KB) = per Q (64 heads)
constexpr int kCoreRowBytes = 16;             // one core-matrix row: 8 bf16
constexpr int kGroupBytes = kHeadDim / 8 * 128;  // 8 rows × 512 dims: 8 KB (SBO of Q and K)
constexpr int kPartS = kHeadDim + 8;  // fp32 row stride of the partial O read by cluster_merge_tail
constexpr int kProbeSlots = 23;  // 0..15 as the mma.sync kernel's, 16..22 the steady-state sums
constexpr int kProducerRegs = 120, kConsumerRegs = 184;  // setmaxnreg; each role is allocated within its count
// setmaxnreg.inc only takes registers the CTA was launched with (168 a thread): the roles must fit.
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 168 * kThreads, "the launch's registers");
constexpr int kWsMaxCluster = 8;  // cluster_merge_tail's (m, l) copy: two pairs per thread
static_assert(2 * kThreads >= kWsMaxCluster * kHeads, "two (m, l) pairs per thread");
namespace cg = cooperative_groups;

struct Smem {
  union {
    __nv_bfloat16 qk[(1 + kStages) * kTileElems];  // Q, then the K stages (core-matrix layout)
    float part[kHeads * kPartS];                    // the in-cluster merge's partial O
  };
  union {
    float s[3 * kMaxCluster * kHeads];   // merge weights, (m, l) copies (cluster_merge_tail)
    __nv_bfloat16 pc[kHeads * kTile];    // P, core-matrix layout (A of P·V)
  };
  float red_max[2][kHeads], red_sum[2][kHeads];  // per consumer warpgroup
  float alpha[kHeads];  // cluster_merge_tail's output scales
  float2 ml[kHeads];
  uint8_t tile_valid[kStages][kTile];
  uint64_t full[kStages], empty[kStages];
  long long stamp[kProbeSlots];
};
static_assert(sizeof(float) * kHeads * kPartS <= sizeof(__nv_bfloat16) * (1 + kStages) * kTileElems,
              "partial O fits over Q and the K stages");

#include "gpu/sm90_sparse_decode_rows.cuh"  // RowList, row_list, resolve, row_chunk, probe_mark

#include "gpu/sm90_sparse_decode_merge.cuh"  // store_out2, cluster_merge_tail, merge_kernel

// kProbe only: clock64, else 0 (the steady-state sums' stamps; no code in the plain kernel).
template <bool kProbe>
__device__ __forceinline__ long long probe_clock() {
  if constexpr (kProbe) return clock64();
  else return 0;
}

// What an invalid (−1, padding) candidate's producer threads load: zero codes, zero scale bytes
// (dequantized to +0 by either path, the bits a select of zeros gave), never written.
__device__ __align__(16) uint8_t g_zero_entry[kEntryData + kEntryScales];

struct WsParams {
  float* ws;  // merge-kernel partials (cluster == 1 and splits > 1)
  int splits, min_chunk;
  bool cluster_merge;
};
// kProbe only: [grid][kSparseDecodeProbeSlots] stamps (sparse_decode_probe; set before a probe launch, so the
// plain kernel's parameters stay as they are; one probe call at a time).
__device__ long long* g_ws_probe;

// Probe instantiation (kProbe, sparse_decode_probe; probe_mark stamps, ws_epilogue writes the
// CTA's stamps out). Slots: 0 entry, 1 the row's lengths, 2 the producer's first tile stored, 3 Q
// loaded, 4 the first tile's full wait, 5 its Q·Kᵀ, 6 its softmax, 7 its P·V, 8 the last tile
// done, 9 the producer's first tile's loads issued, 10 their first piece arrived, 11 the merge,
// 12 the last cluster barrier (1, 2, 9, 10: producer thread 0; the others: consumer thread 128).
// Steady-state sums over tiles 1.. (clock64 cycles): 16 the consumer's wait on full, 17 its Q·Kᵀ
// (issue to wait), 18 its softmax, 19 O's rescale and P·V, 20 the producer's wait on empty, 21
// its stores (with the next tile's loads) to its arrival on full; 22 the CTA's tiles. The plain
// instantiation's code is the same as without the probe (its PTX compared: docs/attention-decode-rounds.md round 6).

// Byte offset of (row, 8-element chunk) in a core-matrix tile of 512-wide rows.
__device__ __forceinline__ uint32_t core_off(int row, int chunk) {
  return uint32_t(((row >> 3) * (kHeadDim / 8) + chunk) * 128 + (row & 7) * kCoreRowBytes);
}

// One producer thread's share of a tile: half hb of each of the 18 32-byte pairs of candidate c
// (16 bytes at 32k + 16hb), and the candidate's 8 scale bytes. Lanes 2i, 2i + 1 of a warp take
// the two halves of candidate 16·warp + i, so a load instruction reads 16 whole 32-byte sectors.
struct TileLoad {
  uint4 v[18];
  uint2 scales;
};
// Loads piece k of a candidate's share. Unpredicated (an invalid candidate reads g_zero_entry,
// whose zero codes and scales dequantize to +0, so no select): a predicated load's zero fallback
// made ptxas move the loaded registers right after the load, which waited for the data at once.
__device__ __forceinline__ void load_piece(TileLoad& t, int k, const uint8_t* data, int hb) {
  t.v[k] = __ldg(reinterpret_cast<const uint4*>(data + k * 32 + hb * 16));
}
__device__ __forceinline__ void load_scales(TileLoad& t, const uint8_t* sc) {
  t.scales = __ldg(reinterpret_cast<const uint2*>(sc));
}
// Dequantizes piece k of the share into the stage's tile (zeros for an invalid candidate).
// kIntDequant: dequant_e4m3x4_int (the same bits without the fp32 round trip). kDiag 1
// (measurement only, wrong results): the codes stored as they are, no dequantization.
template <bool kIntDequant, int kDiag = 0>
__device__ __forceinline__ void store_piece(const TileLoad& t, int k, uint8_t* tile, int c, int hb) {
  const uint4 w = t.v[k];  // an invalid candidate's: g_zero_entry's zeros
  if (k < 14) {  // nope: 16 e4m3 codes, dims [32k + 16hb, +16), scale tile k / 2
    const int j = k / 2;
    const uint32_t sb = (j < 4 ? t.scales.x >> (8 * j) : t.scales.y >> (8 * (j - 4))) & 0xff;
    uint4 lo = w, hi = w;
    if constexpr (kDiag != 1) dequant_e4m3x16<kIntDequant>(w, uint8_t(sb), lo, hi);
    *reinterpret_cast<uint4*>(tile + core_off(c, 4 * k + 2 * hb)) = lo;
    *reinterpret_cast<uint4*>(tile + core_off(c, 4 * k + 2 * hb + 1)) = hi;
  } else {  // rope: 8 bf16 dims 448 + 16(k − 14) + 8hb
    *reinterpret_cast<uint4*>(tile + core_off(c, kNopeDim / 8 + 2 * (k - 14) + hb)) = w;
  }
}
__device__ __forceinline__ void load_share(TileLoad& t, const uint8_t* d, const uint8_t* s, int hb) {
  load_scales(t, s);
#pragma unroll
  for (int k = 0; k < 18; ++k) load_piece(t, k, d, hb);
}
// Stores the share (tile t) into the stage while loading the next tile's share (addresses d, s,
// never null) into the same registers, piece by piece: the next tile's loads fly during this
// tile's stores.
template <bool kIntDequant, int kDiag = 0>
__device__ __forceinline__ void store_share_load_next(TileLoad& t, uint8_t* tile, int c, int hb,
                                                      const uint8_t* d, const uint8_t* s) {
#pragma unroll
  for (int k = 0; k < 18; ++k) {
    store_piece<kIntDequant, kDiag>(t, k, tile, c, hb);
    if (k == 13) load_scales(t, s);  // the last nope piece has used the scales
    load_piece(t, k, d, hb);
  }
}

// The explicit list's id at list position j < end of row r (−1 past the split's end or where
// the list is implicit: resolve computes those ids itself). Loaded ahead of resolve_at.
__device__ __forceinline__ int32_t list_id(const SparseDecodeArgs& a, const RowList& rl, int r, int j, int end) {
  if (j >= end) return -1;
  if (j < rl.main_len) return a.main_idx != nullptr ? __ldg(a.main_idx + int64_t(r) * a.main_stride + j) : -1;
  return a.extra_idx != nullptr ? __ldg(a.extra_idx + int64_t(r) * a.extra_stride + (j - rl.main_len)) : -1;
}
// Entry addresses of list position j (nullptr past `end` or for −1); id = list_id(…, j, end).
__device__ __forceinline__ void resolve_at(const SparseDecodeArgs& a, const RowList& rl, int r, int j, int end,
                                           int32_t id, const uint8_t*& d, const uint8_t*& s) {
  resolve(a, rl, r, j < end ? j : rl.total, d, s, true, id);
}

// Epilogue (every thread of the CTA calls it; holds: a consumer thread, whose o holds rows h0,
// h0 + 8 × dims 256cw + 8i + 2(lane%4) + {0, 1}; the producer passes holds = false).
template <bool kProbe>
__device__ __forceinline__ void ws_epilogue(Smem& sm, const SparseDecodeArgs& a, const WsParams& kp,
                                            const float (&o)[128], const float (&m_run)[2],
                                            const float (&l_run)[2], bool holds, int tiles) {
  const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, cw = wg - 1, w = (tid >> 5) & 3;
  const int h0 = 16 * w + (lane >> 2), h1 = h0 + 8;
  const int splits = kp.splits, split = blockIdx.x % splits, r = blockIdx.x / splits, H = a.heads;
  const int64_t q_off = int64_t(r) * H * kHeadDim, unit = int64_t(r) * splits + split;
  float* const ml_ws = kp.ws + unit * H * 2;
  if (splits == 1) {
    if (!holds) return;
    float inv[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int h = k ? h1 : h0;
      inv[k] = h >= H || m_run[k] == -INFINITY ? 0.0f : 1.0f / (l_run[k] + __expf(a.sink[h] - m_run[k]));
    }
#pragma unroll
    for (int i8 = 0; i8 < 32; ++i8) {
      const int d = 256 * cw + 8 * i8 + 2 * (lane & 3);
      if (h0 < H) store_out2(a, q_off + h0 * kHeadDim + d, o[4 * i8] * inv[0], o[4 * i8 + 1] * inv[0]);
      if (h1 < H) store_out2(a, q_off + h1 * kHeadDim + d, o[4 * i8 + 2] * inv[1], o[4 * i8 + 3] * inv[1]);
    }
  } else if (kp.cluster_merge) {
    __syncthreads();  // every wgmma read of Q / K is done: the partial O goes over them
    if (holds && tiles > 0) {
#pragma unroll
      for (int i8 = 0; i8 < 32; ++i8) {
        const int d = 256 * cw + 8 * i8 + 2 * (lane & 3);
        if (h0 < H) *reinterpret_cast<float2*>(sm.part + h0 * kPartS + d) = make_float2(o[4 * i8], o[4 * i8 + 1]);
        if (h1 < H) *reinterpret_cast<float2*>(sm.part + h1 * kPartS + d) = make_float2(o[4 * i8 + 2], o[4 * i8 + 3]);
      }
    }
    if (wg == 1 && (lane & 3) == 0) {
      sm.ml[h0] = make_float2(m_run[0], l_run[0]);
      sm.ml[h1] = make_float2(m_run[1], l_run[1]);
    }
    cg::this_cluster().sync();
    const int units = H * (kHeadDim / 4), per = (units + splits - 1) / splits;
    const int u1 = min(units, (split + 1) * per), u_first = split * per + tid;
    if (splits == 8)
      cluster_merge_tail<8, false>(sm, a, sm.part, 8, u_first, u1, q_off, H, a.sink);
    else if (splits == 4)
      cluster_merge_tail<4, false>(sm, a, sm.part, 4, u_first, u1, q_off, H, a.sink);
    else
      cluster_merge_tail<2, false>(sm, a, sm.part, 2, u_first, u1, q_off, H, a.sink);
    probe_mark<kProbe>(sm, 11, 128);
    asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
    asm volatile("barrier.cluster.wait;\n" ::: "memory");
    probe_mark<kProbe>(sm, 12, 128);
    if constexpr (kProbe) {
      __syncthreads();
      if (tid == 0) probe_write(sm, g_ws_probe);
    }
  } else {
    if (!holds) return;
    float* po = kp.ws + int64_t(a.rows) * splits * H * 2 + unit * H * kHeadDim;
    if (wg == 1 && (lane & 3) == 0)
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int h = k ? h1 : h0;
        if (h < H) {
          ml_ws[h * 2] = m_run[k];
          ml_ws[h * 2 + 1] = l_run[k];
        }
      }
#pragma unroll
    for (int i8 = 0; i8 < 32; ++i8) {
      const int d = 256 * cw + 8 * i8 + 2 * (lane & 3);
      if (h0 < H) *reinterpret_cast<float2*>(po + h0 * kHeadDim + d) = make_float2(o[4 * i8], o[4 * i8 + 1]);
      if (h1 < H) *reinterpret_cast<float2*>(po + h1 * kHeadDim + d) = make_float2(o[4 * i8 + 2], o[4 * i8 + 3]);
    }
  }
}

// One tile's softmax for a consumer thread (rows h0, h1; candidates 32cw + … of the tile in
// sacc): scores, the row max over both consumer warpgroups (named barrier 2), P = e^(s − m) as
// bf16 into the P buffer (unrounded into the row sums), the sums over both warpgroups (second
// barrier). Updates m_run, l_run; returns in alpha the factor the running O must be scaled by.
__device__ __forceinline__ void tile_softmax(Smem& sm, const SparseDecodeArgs& a, float (&sacc)[16], int st, int cw,
                                             int lane, int h0, int h1, float (&m_run)[2], float (&l_run)[2],
                                             float (&alpha)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int e = 0; e < 16; ++e) {
    const int cn = 32 * cw + 8 * (e >> 2) + 2 * (lane & 3) + (e & 1);
    const float v = sm.tile_valid[st][cn] ? sacc[e] * a.scale : -INFINITY;
    sacc[e] = v;
    mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], v);
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    mx[k] = fmaxf(mx[k], __shfl_xor_sync(~0u, mx[k], 1));
    mx[k] = fmaxf(mx[k], __shfl_xor_sync(~0u, mx[k], 2));
  }
  if ((lane & 3) == 0) {
    sm.red_max[cw][h0] = mx[0];
    sm.red_max[cw][h1] = mx[1];
  }
  named_sync(2, 256);
  float m_new[2], ps[2] = {0.0f, 0.0f};
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    m_new[k] = fmaxf(m_run[k], fmaxf(sm.red_max[0][k ? h1 : h0], sm.red_max[1][k ? h1 : h0]));
    alpha[k] = m_new[k] == -INFINITY ? 1.0f : __expf(m_run[k] - m_new[k]);
  }
  uint8_t* const pc = reinterpret_cast<uint8_t*>(sm.pc);
#pragma unroll
  for (int i4 = 0; i4 < 4; ++i4)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      float pv[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = sacc[4 * i4 + 2 * k + e];
        pv[e] = (m_new[k] == -INFINITY || v == -INFINITY) ? 0.0f : __expf(v - m_new[k]);
        ps[k] += pv[e];
      }
      const int cn = 32 * cw + 8 * i4 + 2 * (lane & 3);
      const int h = k ? h1 : h0;
      *reinterpret_cast<uint32_t*>(pc + (h >> 3) * 1024 + (cn >> 3) * 128 + (h & 7) * kCoreRowBytes + (cn & 7) * 2) =
          pack_bf16x2(pv[0], pv[1]);
    }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    ps[k] += __shfl_xor_sync(~0u, ps[k], 1);
    ps[k] += __shfl_xor_sync(~0u, ps[k], 2);
  }
  if ((lane & 3) == 0) {
    sm.red_sum[cw][h0] = ps[0];
    sm.red_sum[cw][h1] = ps[1];
  }
  fence_proxy_async();  // P → the other warpgroup's P·V
  named_sync(2, 256);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    l_run[k] = fmaf(l_run[k], alpha[k], sm.red_sum[0][k ? h1 : h0] + sm.red_sum[1][k ? h1 : h0]);
    m_run[k] = m_new[k];
  }
}

// kDiag (measurement only, wrong results; DSV4_WS_DIAG): 1 the producer stores the codes without
// dequantizing them, 2 the consumers issue no wgmma (every barrier and the softmax stay).
template <bool kProbe, bool kIntDequant = false, int kDiag = 0>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_decode_ws_kernel(const __grid_constant__ SparseDecodeArgs a, const WsParams kp) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7;
  if (tid < kStages) {
    mbar_init(&sm.full[tid], 128);   // the producer's threads
    mbar_init(&sm.empty[tid], 256);  // the consumers' threads
  }
  probe_mark<kProbe>(sm, 0);
  pdl_wait();
  pdl_trigger();
  const int splits = kp.splits, split = blockIdx.x % splits, r = blockIdx.x / splits;
  const int H = a.heads;
  const int64_t q_off = int64_t(r) * H * kHeadDim;
  const RowList rl = row_list(a, r);
  const int chunk = row_chunk(rl.total, splits, kp.min_chunk, kp.cluster_merge);
  const int begin = split * chunk, end = min(rl.total, begin + chunk);
  const int tiles = begin < end ? (end - begin + kTile - 1) / kTile : 0;
  probe_mark<kProbe>(sm, 1, 0, tiles);
  float* const ml_ws = kp.ws + (int64_t(r) * splits + split) * H * 2;
  if (tiles == 0 && splits > 1 && !kp.cluster_merge) {  // an empty partial (the merge skips it)
    for (int h = tid; h < H; h += kThreads) {
      ml_ws[h * 2] = -INFINITY;
      ml_ws[h * 2 + 1] = 0.0f;
    }
    return;
  }
  __syncthreads();  // barriers initialized

  uint8_t* const qk_bytes = reinterpret_cast<uint8_t*>(sm.qk);
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  if (wg == 0) {
    // ---- producer: tile t + 1's loads are issued while tile t is stored (one register share);
    // each tile's list ids are loaded two tiles before its data ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    const int c = 16 * (tid >> 5) + (lane >> 1), hb = lane & 1;
    const uint8_t* const dummy = g_zero_entry;  // invalid candidates' data and scales
    TileLoad share;
    const uint8_t *d, *s;
    resolve_at(a, rl, r, begin + c, end, list_id(a, rl, r, begin + c, end), d, s);
    bool valid = d != nullptr;
    if (tiles > 0) load_share(share, valid ? d : dummy, valid ? s : dummy, hb);
    probe_mark<kProbe>(sm, 9);
    int32_t id_n = list_id(a, rl, r, begin + kTile + c, end), id_nn = list_id(a, rl, r, begin + 2 * kTile + c, end);
    long long sum_empty = 0, sum_store = 0;  // kProbe: steady-state sums (slots 20, 21)
    for (int t = 0; t < tiles; ++t) {
      const int st = t & 1;
      resolve_at(a, rl, r, begin + (t + 1) * kTile + c, end, id_n, d, s);
      id_n = id_nn;
      id_nn = list_id(a, rl, r, begin + (t + 3) * kTile + c, end);
      const long long c0 = probe_clock<kProbe>();
      if (t >= kStages) mbar_wait(&sm.empty[st], ((t >> 1) - 1) & 1);
      const long long c1 = probe_clock<kProbe>();
      const bool valid_next = d != nullptr;
      if (t == 0) probe_mark<kProbe>(sm, 10, 0, share.v[0].x);
      store_share_load_next<kIntDequant, kDiag>(share, qk_bytes + (1 + st) * kTileElems * 2, c, hb, valid_next ? d : dummy,
                            valid_next ? s : dummy);
      if (hb == 0) sm.tile_valid[st][c] = valid;
      fence_proxy_async();
      mbar_arrive(&sm.full[st]);
      if (t == 0) probe_mark<kProbe>(sm, 2);
      if constexpr (kProbe)
        if (t > 0) {
          sum_empty += c1 - c0;
          sum_store += clock64() - c1;
        }
      valid = valid_next;
    }
    if constexpr (kProbe)
      if (tid == 0) {
        sm.stamp[20] = sum_empty;
        sm.stamp[21] = sum_store;
        sm.stamp[22] = tiles;
      }
    const float none[128] = {};
    ws_epilogue<kProbe>(sm, a, kp, none, m_run, l_run, false, tiles);
    return;
  }
  // ---- consumers (rows h0 = 16w + lane/4 and h0 + 8 of the 64-head tile) ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int cw = wg - 1, w = (tid >> 5) & 3;
  const int h0 = 16 * w + (lane >> 2), h1 = h0 + 8;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  if (tiles > 0) {
    // Q (rows ≥ H zero) into the core-matrix layout, then the tiles.
    const int ct = tid - 128;
    for (int i = ct; i < kHeads * (kHeadDim / 8); i += 256) {
      const int h = i / (kHeadDim / 8), ch = i % (kHeadDim / 8);
      uint8_t* dst = qk_bytes + core_off(h, ch);
      if (h >= H) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      } else if (a.q_f32 == nullptr) {
        cp_async16(dst, a.q + q_off + h * kHeadDim + ch * 8);
      } else {
        const float4* src = reinterpret_cast<const float4*>(a.q_f32 + q_off + h * kHeadDim + ch * 8);
        const float4 x = src[0], y = src[1];
        *reinterpret_cast<uint4*>(dst) = make_uint4(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w),
                                                    pack_bf16x2(y.x, y.y), pack_bf16x2(y.z, y.w));
      }
    }
    cp_async_commit();
    cp_async_wait_all();
    fence_proxy_async();
    named_sync(2, 256);
    probe_mark<kProbe>(sm, 3, 128);
    float sacc[16] = {};  // (the first wgmma of a tile ignores it: scale-d 0)
    // S = Q · K[32cw .. 32cw + 32)ᵀ of tile t over the 512 dims, issued and committed.
    auto issue_qk = [&](int t) {
      const int st = t & 1;
      const uint64_t qd = opaque_u64(smem_desc(qk_bytes, 128, kGroupBytes));
      const uint8_t* kt = qk_bytes + (1 + st) * kTileElems * 2;
      const uint64_t kd = opaque_u64(smem_desc(kt + 4 * cw * kGroupBytes, 128, kGroupBytes));
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks)
        wgmma_m64n32_ss(sacc, desc_add(qd, ks * 256), desc_add(kd, ks * 256), ks > 0);
      wgmma_commit();
    };
    // O_cw += P · V[:, 256cw .. 256cw + 256) of tile t (V = its stage, MN-major), committed.
    auto issue_pv = [&](int t) {
      const uint64_t pd = opaque_u64(smem_desc(sm.pc, 128, 1024));
      const uint8_t* kt = qk_bytes + (1 + (t & 1)) * kTileElems * 2;
      const uint64_t vd = opaque_u64(smem_desc(kt + cw * 32 * 128, kGroupBytes, 128));
#pragma unroll
      for (int kc = 0; kc < kTile / 16; ++kc)
        wgmma_m64n256_ss_tb(o, desc_add(pd, kc * 256), desc_add(vd, 2 * kc * kGroupBytes), 1);
      wgmma_commit();
    };
    // One tile after another (a pipelined form — tile t + 1's Q·Kᵀ issued before tile t's P·V,
    // its softmax under P·V — measured 14 % slower at 65 tiles a CTA: docs/attention-decode-rounds.md).
    float alpha[2];
    long long sums[4] = {};  // kProbe: steady-state sums (slots 16..19)
    for (int i = 0; i < tiles; ++i) {
      const long long c0 = probe_clock<kProbe>();
      wgmma_fence();
      mbar_wait(&sm.full[i & 1], (i >> 1) & 1);
      const long long c1 = probe_clock<kProbe>();
      if constexpr (kDiag != 2) issue_qk(i);
      if (i == 0) probe_mark<kProbe>(sm, 4, 128);
      wgmma_wait_all();
      fence_regs(sacc);
      if (i == 0) probe_mark<kProbe>(sm, 5, 128, __float_as_int(sacc[0]));
      const long long c2 = probe_clock<kProbe>();
      tile_softmax(sm, a, sacc, i & 1, cw, lane, h0, h1, m_run, l_run, alpha);
      if (i == 0) probe_mark<kProbe>(sm, 6, 128, __float_as_int(alpha[0]));
      const long long c3 = probe_clock<kProbe>();
      fence_regs(o);
      if (__any_sync(~0u, alpha[0] != 1.0f || alpha[1] != 1.0f)) {  // × 1 is exact: skipped
#pragma unroll
        for (int i8 = 0; i8 < 32; ++i8) {
          o[4 * i8] *= alpha[0];
          o[4 * i8 + 1] *= alpha[0];
          o[4 * i8 + 2] *= alpha[1];
          o[4 * i8 + 3] *= alpha[1];
        }
      }
      fence_regs(o);
      wgmma_fence();
      if constexpr (kDiag != 2) issue_pv(i);
      wgmma_wait_all();
      fence_regs(o);
      if (i == 0) probe_mark<kProbe>(sm, 7, 128, __float_as_int(o[0]));
      if constexpr (kProbe)
        if (i > 0) {
          asm volatile("" ::"f"(o[0]));
          sums[0] += c1 - c0;
          sums[1] += c2 - c1;
          sums[2] += c3 - c2;
          sums[3] += clock64() - c3;
        }
      mbar_arrive(&sm.empty[i & 1]);
    }
    probe_mark<kProbe>(sm, 8, 128);
    if constexpr (kProbe)
      if (tid == 128)
        for (int k = 0; k < 4; ++k) sm.stamp[16 + k] = sums[k];
  }
  ws_epilogue<kProbe>(sm, a, kp, o, m_run, l_run, true, tiles);
}

using WsKernel = void (*)(const SparseDecodeArgs, const WsParams);
// The instantiations: plain f32, plain int, probe, and the diagnostics DSV4_WS_DIAG = 1, 2.
enum WsInstance { kWsF32, kWsInt, kWsProbe, kWsDiag1, kWsDiag2, kWsInstances };
constexpr WsKernel kWsKernels[kWsInstances] = {sparse_decode_ws_kernel<false>, sparse_decode_ws_kernel<false, true>,
                                               sparse_decode_ws_kernel<true>, sparse_decode_ws_kernel<false, false, 1>,
                                               sparse_decode_ws_kernel<false, false, 2>};

bool set_ws_attributes() {
  for (WsKernel k : kWsKernels)
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Smem))) != cudaSuccess)
      return false;
  return true;
}

}  // namespace

void sparse_decode_ws(const SparseDecodeArgs& a, const SparseDecodePlan& p, void* workspace, long long* probe,
                      cudaStream_t stream) {
  if (a.rows == 0) return;
  DSV4_CHECK(p.head_groups == 1 && p.cluster <= kWsMaxCluster,
             "sparse decode (warp-specialized): one head group and clusters ≤ ", kWsMaxCluster, ", got ",
             p.head_groups, " / ", p.cluster);
  DSV4_CHECK(probe == nullptr || p.cluster > 1, "sparse decode (warp-specialized) probe: in-cluster merge plans only");
  static std::once_flag attr_set[kMaxDevices];
  call_once_per_device(attr_set, [] { DSV4_CHECK(set_ws_attributes(), "sparse decode ws: cudaFuncSetAttribute failed"); });
  WsParams kp;
  kp.ws = static_cast<float*>(workspace);
  kp.splits = p.splits;
  kp.min_chunk = p.min_chunk;
  kp.cluster_merge = p.cluster > 1;
  cudaLaunchAttribute attr[2];
  const unsigned n_attr = cluster_pdl_attrs(attr, p.cluster, pdl_enabled() && (kp.cluster_merge || p.splits == 1));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(a.rows) * unsigned(p.splits));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = sizeof(Smem);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  static const int diag = dsv4::env_int("DSV4_WS_DIAG", 0);  // measurement only: wrong results
  const KvDequant dq = kv_dequant_mode();
  const WsInstance which = probe != nullptr ? kWsProbe
                           : diag == 1      ? kWsDiag1
                           : diag == 2      ? kWsDiag2
                           : dq == KvDequant::kInt || (dq == KvDequant::kAuto && p.chunk >= kWsIntDequantMinChunk)
                               ? kWsInt
                               : kWsF32;
  if (probe != nullptr)
    CUDA_CHECK(cudaMemcpyToSymbolAsync(g_ws_probe, &probe, sizeof(probe), 0, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kWsKernels[which], a, kp));
  if (p.splits > 1 && !kp.cluster_merge) {
    merge_kernel<<<unsigned(a.rows) * unsigned(a.heads), 128, 0, stream>>>(a, p.splits, kp.ws);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace dsv4::gpu::sm90
