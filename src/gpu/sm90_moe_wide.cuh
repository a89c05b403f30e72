// Grouped W4A8 MoE on sm_90a, device side: the gemm phases (1: gate+up, 2: down) for large
// calls (prefill), with chunks of up to NW = kWideN = 128 tokens (or NW = 64: one column half,
// for calls whose experts get ~40–60 tokens; the template parameter of the kernels). Same per-element arithmetic as
// moe_item (sm90_moe_fp4.cuh) — so the same bits whatever the chunk size — but one weight pass
// and one FP4 → e4m3 conversion per 128 of an expert's tokens, and two m64n64k32 wgmmas (the
// 128 slots' column halves) per 32-K block and wait (4× the work of the 32-token chunks).
//
// CTA = 2 warpgroups (8 warps), one CTA per SM, persistent over items. An item is (chunk,
// row group); both warpgroups work on the same chunk, so its activations are staged once per
// CTA. Warp (h = warp / 4, w = warp % 4) owns one m-tile of 16 output rows:
//   gate+up (group of 64 I rows): FP4 w1 (h = 0) or w3 (h = 1) stage-tile 4·grp + w; FP8 (the
//     shared expert) the two 8-row tiles 2(4·grp + w), +1 of w1 / w3. The epilogue pairs the
//     gate and up sums through shared memory.
//   down (group of 128 D rows): FP4 the 16-row half h of w2 tile 4·grp + w; FP8 w2 tile
//     8·grp + 4h + w.
// The shared expert's chunks are listed twice (halves, for the small kernels); here the first
// listing covers all rows and the second is skipped. The shared expert runs as its own launch.
// One ring of kWideStages stages of 256 K across the CTA's items; a stage holds (activations and
// their scales / records copied by cp.async from all 256 threads, each warp's weights by one
// lane's bulk copies onto the slot's mbarrier):
//   activations kWideN slots × 256 B in the 128-byte-swizzled wgmma B layout (sw128_desc),
//   then per slot 4 floats: the Q8 scales of 128-K blocks 2s−2 .. 2s+1
//   (the first two only for s > 0: the FP4 accumulator's rescale at block edges needs the
//   previous block's scale);
//   per warp 4 KB of weights (FP4: 16 rows × 128 B, FP8: 16 rows × 256 B) + FP4 row scales
//   (16 rows × 8 B).
#pragma once

#include <cstdint>

#include "gpu/sm90_moe_fp4.cuh"
#include "gpu/sm90_moe_group.cuh"  // q8_row_cta, stage_record

namespace dsv4::gpu::moe4 {

constexpr int kWideN = 128;      // the most tokens of a chunk (the kernels' NW: kWideN or kWideHalfN)
constexpr int kWideHalfN = 64;   // chunks of one column half (variant 12)
constexpr int kWideStages = 3;
constexpr int kWideAct = kWideN * 256;                 // activations of one stage
constexpr int kWideScales = kWideN * 16;               // 4 floats per slot
constexpr int kWideWarp = 4096 + 128;                  // weights + FP4 row scales
constexpr int kWideStage = kWideAct + kWideScales + 8 * kWideWarp;  // 68,608 B
// + two items' activation rows per slot (2 × 128 ints), the ring slots' weight mbarriers (64 B);
// + 1 KB to align the ring to 1024 bytes (the swizzled layout's atoms).
constexpr int kWideSmem = kWideStages * kWideStage + 2 * kWideN * 4 + 64 + 1024;  // 207,936 B

// d = A(64×32 e4m3, the warp's m16n8k32 A fragment) · B(32 × 64 e4m3 at desc), fp32, fresh: one
// 64-column half of the 128 slots. d[4j + 2r + c]: row g + 8r of the warp's 16, column
// 8j + 2t + c of the half.
__device__ __forceinline__ void wgmma_e4m3_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]),
        "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]),
        "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]),
        "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

// A stage's activations are in the 128-byte-swizzled K-major layout (descriptor: sw128_desc,
// sm90_wgmma_common.cuh): K-half hk (128 K) of slot n is the 128-byte row at hk·NW·128 + n·128,
// its 16-byte granule c stored at granule c ^ (n & 7) (so a warp's copy of whole rows writes
// whole 128-byte lines, and the global reads are contiguous rows); 8-row groups 1024 B apart
// (stride byte offset). The stage base must be 1024-byte aligned.
// Descriptor offset (16-byte units) of 32-K block kb (0..7) of the stage and of column half
// `half` (slots 64·half ..): within a K-half the start address moves by 32 bytes per block.
template <int NW>
__device__ __forceinline__ uint64_t b_off(int kb, int half) {
  return uint64_t((kb >> 2) * (NW * 128 / 16) + (kb & 3) * 2 + half * (64 * 128 / 16));
}
// Byte offset of granule c (0..7) of K-half hk of slot n in the swizzled stage layout.
template <int NW>
__device__ __forceinline__ int act_sw_offset(int n, int hk, int c) { return hk * NW * 128 + n * 128 + ((c ^ (n & 7)) << 4); }

// Where warp (h, w) of an item reads its weights: stage s of its 16 rows is the 2 KB block
// wa + s·stride (FP4; FP8: 2 KB at wa + s·stride and 2 KB at wb + s·stride), FP4 row scales
// 128 B at sc + s·sstride; FP8 block scales sblk[s·2 + hb]; out_row0 = first output row.
struct WideWarp {
  const uint8_t *wa, *wb, *sc, *sblk;
  int stride, sstride, out_row0;
};

template <bool kUp, bool kFp8>
__device__ __forceinline__ WideWarp wide_warp(const Params& p, const ExpertPtrs& ex, int grp, int h, int w) {
  const int K = kUp ? p.D : p.I, nst = K / 256;
  WideWarp r{};
  if constexpr (!kFp8) {
    r.stride = kUp ? 2048 : 4096;
    r.sstride = kUp ? 128 : 256;
    const int tile = 4 * grp + w;  // up: 16-row tiles of w1 / w3; down: 32-row tiles of w2
    if constexpr (kUp) {
      r.wa = (h ? ex.w3 : ex.w1) + size_t(tile) * nst * 2048;
      r.sc = (h ? ex.s3 : ex.s1) + size_t(tile) * nst * 128;
      r.out_row0 = 16 * tile;
    } else {
      r.wa = ex.w2 + size_t(tile) * nst * 4096 + h * 2048;
      r.sc = ex.s2 + size_t(tile) * nst * 256 + h * 128;
      r.out_row0 = 32 * tile + 16 * h;
    }
  } else {
    if constexpr (kUp) {
      r.stride = 2048;
      const int t8 = 2 * (4 * grp + w);  // 8-row tiles of w1 / w3
      const uint8_t* m = h ? ex.w3 : ex.w1;
      r.wa = m + size_t(t8) * nst * 2048;
      r.wb = m + size_t(t8 + 1) * nst * 2048;
      r.out_row0 = 16 * (4 * grp + w);
      r.sblk = (h ? ex.s3 : ex.s1) + (r.out_row0 / 128) * (K / 128);
    } else {
      const int t16 = 8 * grp + 4 * h + w;  // 16-row tiles of w2 (4 KB per stage)
      r.wa = ex.w2 + size_t(t16) * nst * 4096;
      r.wb = r.wa + 2048;
      r.stride = 4096;
      r.out_row0 = 16 * t16;
      r.sblk = ex.s2 + (r.out_row0 / 128) * (K / 128);
    }
  }
  return r;
}

// The FP4 partial d of 32-K block kb (within the stage) for column half `half` (slots
// 64·half ..) into acc (units of 2⁶·s_x): row g's E8M0 byte kb of sr0, row g+8's of sr1.
__device__ __forceinline__ void wide_fma_fp4(float (&acc)[64], const float (&d)[32], int half, int kb, uint2 sr0,
                                             uint2 sr1) {
  const uint32_t sel = 0x0444u | (uint32_t(kb & 3) << 12);
  const float sg = __uint_as_float(prmt(kb >= 4 ? sr0.y : sr0.x, 0u, sel) >> 1);
  const float sg8 = __uint_as_float(prmt(kb >= 4 ? sr1.y : sr1.x, 0u, sel) >> 1);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int e = 4 * (j + 8 * half);
    acc[e + 0] = fmaf(d[4 * j + 0], sg, acc[e + 0]);
    acc[e + 1] = fmaf(d[4 * j + 1], sg, acc[e + 1]);
    acc[e + 2] = fmaf(d[4 * j + 2], sg8, acc[e + 2]);
    acc[e + 3] = fmaf(d[4 * j + 3], sg8, acc[e + 3]);
  }
}

// Column slot 8j + 2t + c's value of one plane of the stage's FP4 records (stage_record's
// entry, a plane of kWideN floats in slot order) into r[2j + c]: the FP4 accumulator's rescale
// factors s_x(old) / s_x(new) at a 128-K block edge (exact powers of two; moe_item's scale_cols),
// or the last block's s_x·2⁶.
template <int NW>
__device__ __forceinline__ void wide_record_plane(float (&r)[32], const float* plane, int t) {
#pragma unroll
  for (int j = 0; j < NW / 8; ++j) {
    const float2 v = *reinterpret_cast<const float2*>(plane + 8 * j + 2 * t);
    r[2 * j] = v.x;
    r[2 * j + 1] = v.y;
  }
}
template <int NW>
__device__ __forceinline__ void wide_rescale(float (&acc)[64], const float (&r)[32]) {
#pragma unroll
  for (int j = 0; j < NW / 8; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      acc[4 * j + c] *= r[2 * j + c];
      acc[4 * j + 2 + c] *= r[2 * j + c];
    }
}

// One 256-K stage of a warp's m-tile: W the warp's ring slot, act the stage's activations
// (scales after them), s the stage's index, last: the item's last stage (FP4: acc ← acc·S).
template <bool kFp8, int NW>
__device__ __forceinline__ void wide_stage(const uint8_t* W, const uint8_t* act, const WideWarp& ww, int s, bool last,
                                           int lane, float (&acc)[64]) {
  const int g = lane >> 2, t = lane & 3;
  const float* scales = reinterpret_cast<const float*>(act + kWideAct);
  const uint64_t desc = sw128_desc(smem_addr(act));
  if constexpr (!kFp8) {
    const uint2 sr0 = *reinterpret_cast<const uint2*>(W + 4096 + g * 8);
    const uint2 sr1 = *reinterpret_cast<const uint2*>(W + 4096 + (g + 8) * 8);
    // Per 32-K block both column halves' wgmmas, one wait, then both partials scaled into acc
    // (the other warpgroup's wgmmas run meanwhile). The stage's two 128-K block edges (before
    // the partials of blocks 0 and 4 enter acc) rescale acc while those blocks' wgmmas run: they
    // touch neither acc nor the ratios, so the ratio loads and multiplies hide behind them.
    // Block kb's FP4 weight words (rows g, g + 8), loaded one block ahead.
    auto wload = [&](int kb, uint32_t& w0, uint32_t& w1) {
      const int gofs = ((kb ^ g) << 4) + t * 4;
      w0 = *reinterpret_cast<const uint32_t*>(W + g * 128 + gofs);
      w1 = *reinterpret_cast<const uint32_t*>(W + (g + 8) * 128 + gofs);
    };
    uint32_t w0, w1;
    wload(0, w0, w1);
#pragma unroll
    for (int kb = 0; kb < 8; ++kb) {
      const uint32_t a[4] = {fp4_lo(w0), fp4_lo(w1), fp4_hi(w0), fp4_hi(w1)};
      float d0[32], d1[32];
      wg_fence();
      wgmma_e4m3_n64(d0, a, desc + b_off<NW>(kb, 0));
      if constexpr (NW == 128) wgmma_e4m3_n64(d1, a, desc + b_off<NW>(kb, 1));
      wg_commit();
      if (kb < 7) wload(kb + 1, w0, w1);
      if ((kb == 0 && s > 0) || kb == 4) {
        float r[32];
        wide_record_plane<NW>(r, scales + (kb == 4 ? kWideN : 0), t);
        wide_rescale<NW>(acc, r);
      }
      wg_wait0();
      wide_fma_fp4(acc, d0, 0, kb, sr0, sr1);
      if constexpr (NW == 128) wide_fma_fp4(acc, d1, 1, kb, sr0, sr1);
    }
    if (last) {  // u → acc = u·2⁶·s_x of the last block
      float m[32];
      wide_record_plane<NW>(m, scales + 2 * kWideN, t);
      wide_rescale<NW>(acc, m);
    }
  } else {
#pragma unroll
    for (int half = 0; half < NW / 64; ++half) {  // slots 64·half .. +63
#pragma unroll 1
      for (int hb = 0; hb < 2; ++hb) {  // 128-K blocks: 4 fresh partials summed in K order, then scaled
        // Two wgmmas per wait: partials 0, 1 into ds, d; then 2, 3 into d, d2.
        float ds[32], d[32], d2[32];
        uint32_t a[4][4];
#pragma unroll
        for (int kq = 0; kq < 4; ++kq) {
          const int gofs = (((2 * (4 * hb + kq) + (t >> 1)) ^ g) << 4) + (t & 1) * 8;
          const uint2 v0 = *reinterpret_cast<const uint2*>(W + g * 256 + gofs);
          const uint2 v1 = *reinterpret_cast<const uint2*>(W + 2048 + g * 256 + gofs);
          a[kq][0] = prmt(v0.x, v0.y, 0x6420);
          a[kq][1] = prmt(v1.x, v1.y, 0x6420);
          a[kq][2] = prmt(v0.x, v0.y, 0x7531);
          a[kq][3] = prmt(v1.x, v1.y, 0x7531);
        }
        wg_fence();
        wgmma_e4m3_n64(ds, a[0], desc + b_off<NW>(4 * hb, half));
        wgmma_e4m3_n64(d, a[1], desc + b_off<NW>(4 * hb + 1, half));
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < 32; ++i) ds[i] += d[i];
        wg_fence();
        wgmma_e4m3_n64(d, a[2], desc + b_off<NW>(4 * hb + 2, half));
        wgmma_e4m3_n64(d2, a[3], desc + b_off<NW>(4 * hb + 3, half));
        wg_commit();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < 32; ++i) ds[i] = (ds[i] + d[i]) + d2[i];
        const float sw = e8m0f(__ldg(ww.sblk + 2 * s + hb));
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int jj = j + 8 * half;
          const float xa = scales[(8 * jj + 2 * t) * 4 + 2 + hb] * sw;
          const float xb = scales[(8 * jj + 2 * t + 1) * 4 + 2 + hb] * sw;
          acc[4 * jj + 0] = fmaf(ds[4 * j + 0], xa, acc[4 * jj + 0]);
          acc[4 * jj + 1] = fmaf(ds[4 * j + 1], xb, acc[4 * jj + 1]);
          acc[4 * jj + 2] = fmaf(ds[4 * j + 2], xa, acc[4 * jj + 2]);
          acc[4 * jj + 3] = fmaf(ds[4 * j + 3], xb, acc[4 * jj + 3]);
        }
      }
    }
  }
}

// This thread's view of one item (chunk ci, row group grp) of phase 1 (kUp) or 2.
struct WideItem {
  Chunk ch;
  int ci, grp;
  WideWarp ww;
  const float* ssrc;  // this thread's slot's activation scales (FP8) or stage records (FP4; slot = tid < ch.n)
  int rb;             // its rows[] buffer (0 / 1)
  bool valid;
};

// Where slot n's row offset sits in a rows[] buffer: wide_issue's thread n % 16 copies slots
// n % 16 + 16i (i < NW/16), so it reads its NW/16 offsets as contiguous int4s.
template <int NW>
__device__ __forceinline__ int wide_row_index(int n) { return (n & 15) * (NW / 16) + (n >> 4); }

// Item `item` of this launch (valid if < total): reads its chunk and expert, writes slot tid's
// activation row's byte offset (row · K: xq / hq hold < 2³¹ bytes) to rows[rb][wide_row_index(tid)]
// (−1: no token). The caller syncs before issuing copies.
template <bool kUp, bool kFp8, int NW>
__device__ __forceinline__ WideItem wide_prepare(const Params& p, int item, int total, int groups, int nsc, int* rows,
                                                 int rb) {
  WideItem it{};
  it.valid = item < total;
  it.rb = rb;
  if (!it.valid) return it;
  const int c = item / groups;
  it.grp = item - c * groups;
  it.ci = kFp8 ? 2 * c : nsc + c;
  it.ch = p.chunks[it.ci];
  const ExpertPtrs ex = kFp8 ? p.shared : p.experts[it.ch.expert];
  const int tid = threadIdx.x, warp = tid >> 5;
  it.ww = wide_warp<kUp, kFp8>(p, ex, it.grp, warp >> 2, warp & 3);
  const int K = kUp ? p.D : p.I;
  const int row = tid < it.ch.n ? (kUp ? p.pos_token[it.ch.pos + tid] : it.ch.pos + tid) : -1;
  if (tid < NW) rows[rb * kWideN + wide_row_index<NW>(tid)] = row >= 0 ? row * K : -1;
  it.ssrc = kFp8 ? (kUp ? p.xs : p.hs) + size_t(max(row, 0)) * (K / 128)
                 : (kUp ? p.xr : p.hr) + size_t(max(row, 0)) * (K / 64);
  return it;
}

// Stage s of item `it` into ring slot st (one cp.async commit group per call, empty if there
// is no such stage; the weights complete on the slot's mbarrier `bar`: one arrival per warp).
// Activations: unit u = tid + 256·i is granule u % 8 of K-half (u / 8) % 2 of slot u / 16, so a
// warp reads two slots' 256 contiguous bytes.
template <bool kUp, bool kFp8, int kDiag, int NW>
__device__ __forceinline__ void wide_issue(const Params& p, const WideItem& it, int s, uint8_t* st, const int* rows,
                                           uint64_t* bar) {
  const int K = kUp ? p.D : p.I, nst = K / 256;
  if (it.valid && s < nst && kDiag != kDiagMathOnly) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int c8 = tid & 7, hk = (tid >> 3) & 1, n0 = tid >> 4;
    // Slots n0 + 16i: their swizzle is n0's (16i ≡ 0 mod 8), so the destinations step by 16 rows.
    const uint8_t* src = (kUp ? p.xq : p.hq) + s * 256 + hk * 128 + c8 * 16;
    uint8_t* dst = st + act_sw_offset<NW>(n0, hk, c8);
    // The NW/16 offsets of slots n0 + 16i, loaded together (wide_row_index).
    int off[NW / 16];
#pragma unroll
    for (int v = 0; v < NW / 64; ++v)
      *reinterpret_cast<int4*>(off + 4 * v) =
          *reinterpret_cast<const int4*>(rows + it.rb * kWideN + n0 * (NW / 16) + 4 * v);
#pragma unroll
    for (int i = 0; i < NW / 16; ++i)
      if (off[i] >= 0) cp_async16(dst + 16 * i * 128, src + off[i]);
    if (tid < it.ch.n) {
      float* sc = reinterpret_cast<float*>(st + kWideAct);
      if constexpr (kFp8) {
        cp8(sc + tid * 4 + 2, it.ssrc + 2 * s);
        if (s > 0) cp8(sc + tid * 4, it.ssrc + 2 * s - 2);
      } else {  // the slot's stage record as three planes
        const float* rec = it.ssrc + 4 * s;
        cp4(sc + tid, rec);
        cp4(sc + kWideN + tid, rec + 1);
        cp4(sc + 2 * kWideN + tid, rec + 2);
      }
    }
    if (lane == 0) {  // the warp's 2 KB of FP4 weights + 128 B of row scales, or 2 × 2 KB of FP8
      uint8_t* ws = st + kWideAct + kWideScales + warp * kWideWarp;
      const WideWarp& ww = it.ww;
      mbar_expect_tx(bar, kFp8 ? 4096 : 2048 + 128);
      bulk_copy(ws, ww.wa + size_t(s) * ww.stride, 2048, bar);
      if constexpr (kFp8) bulk_copy(ws + 2048, ww.wb + size_t(s) * ww.stride, 2048, bar);
      else bulk_copy(ws + 4096, ww.sc + size_t(s) * ww.sstride, 128, bar);
    }
  }
  cp_commit();
}

// The epilogue of item `it` (acc: this warp's m-tile sums; xbuf: 64 KB of free shared memory).
// gate+up: SwiGLU → h (moe_h_q8_kernel quantizes it after the launch); down: y.
template <bool kUp, bool kFp8, int NW>
__device__ __forceinline__ void wide_epilogue(const Params& p, const WideItem& it, const float (&acc)[64],
                                              float* xbuf) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, h = warp >> 2, w = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  const Chunk& ch = it.ch;
  if constexpr (kUp) {
    // Both warpgroups park their sums (gate: h = 0, up: h = 1) in shared memory; warpgroup h
    // then forms the h values of rows g + 8h of the 16 (the other row half from the other's).
#pragma unroll
    for (int i = 0; i < NW / 2; ++i) xbuf[((h * 4 + w) * 64 + i) * 32 + lane] = acc[i];
    __syncthreads();
    const float* other = xbuf + (((1 - h) * 4 + w) * 64) * 32 + lane;
#pragma unroll
    for (int j = 0; j < NW / 8; ++j)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int i = 8 * j + 2 * t + c;
        if (i >= ch.n) continue;
        const float wt = kFp8 ? 1.0f : p.pos_weight[ch.pos + i];
        const int e = 4 * j + 2 * h + c;  // row g + 8h (acc indexed statically: registers)
        const float mine = h == 0 ? acc[4 * j + c] : acc[4 * j + 2 + c];
        const float gv = h == 0 ? mine : other[e * 32], uv = h == 0 ? other[e * 32] : mine;
        p.h[size_t(ch.pos + i) * p.I + it.ww.out_row0 + g + 8 * h] = swiglu_h<!kFp8>(gv, uv, p.limit, wt);
      }
    // (The next item's first barrier orders xbuf's reuse; h's Q8 is moe_h_q8_kernel.)
  } else {
#pragma unroll
    for (int j = 0; j < NW / 8; ++j)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int i = 8 * j + 2 * t + c;
        if (i >= ch.n) continue;
#pragma unroll
        for (int r = 0; r < 2; ++r)
          p.y[size_t(ch.pos + i) * p.D + it.ww.out_row0 + g + 8 * r] = round_bf16(acc[4 * j + 2 * r + c]);
      }
  }
}

// Phase 1b of the wide kernels: the Q8 of h and its FP4 stage records. One CTA per position
// (grid npos, a warp per 128-wide block: the same q8_block_store as moe_item's epilogue, so the
// same codes and scales), then the records (stage_record) of the position's I/256 stages. (In the
// gate+up epilogue — the last of a block's two items, through an arrival counter, fences and
// re-reads — the Q8 cost 6–7 % of the wide launches.)
__global__ void __launch_bounds__(512) moe_h_q8_kernel(const __grid_constant__ Params p) {
  pdl_wait();
  pdl_trigger();
  const size_t pos = blockIdx.x;
  q8_row_cta(p.h + pos * p.I, p.I, p.hq + pos * p.I, p.hs + pos * (p.I / 128), p.hr + pos * (p.I / 64));
}

// Phases 1 (kUp) and 2 with chunks of ≤ kWideN tokens (Params::chunk_tokens == kWideN), one
// launch for the shared expert's chunks (kFp8: chunk list entries 0, 2, …, shared_chunks − 2)
// and one for the routed chunks (the rest): grid ≤ SMs, 256 threads, kWideSmem bytes of dynamic
// shared memory; CTA b takes items b, b + grid, … of (chunk, row group): I/64 groups per chunk
// (gate+up), D/128 (down). (Two kernels: with both paths in one, ptxas spills the
// accumulators or, with the item out of line, serializes the wgmmas.) kDiag (benchmarks, wrong
// results): kDiagLoadOnly the copies without the math, kDiagMathOnly the math without them.
// One ring across items: ring slot = the CTA's running stage count mod kWideStages. When an
// item's mainloop ends, the next item's chunk is read and its first stages issued before this
// item's epilogue, which uses the slot of its own last stage (the other two hold the next
// item's first stages).
template <bool kUp, bool kFp8, int kDiag = kDiagNone, int NW = kWideN>
__global__ void __launch_bounds__(256, 1) moe_wide_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  int* rows = reinterpret_cast<int*>(smem + kWideStages * kWideStage);  // [2][kWideN]
  uint64_t* wbar = reinterpret_cast<uint64_t*>(rows + 2 * kWideN);         // [kWideStages]
  if (threadIdx.x < kWideStages) {  // one arrival per warp; the init visible to the bulk copies
    mbar_init(wbar + threadIdx.x, 8);
    mbar_init_fence();
  }
  pdl_wait();
  pdl_trigger();
  const int groups = kUp ? p.I / 64 : p.D / 128;
  const int nsc = p.has_shared ? shared_chunks(p.T, NW) : 0;
  const int total = (kFp8 ? nsc / 2 : *p.num_chunks - nsc) * groups;
  const int nst = (kUp ? p.D : p.I) / 256;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  auto slot = [&](int gs) { return smem + (gs % kWideStages) * kWideStage; };
  auto bar = [&](int gs) { return wbar + gs % kWideStages; };
  int item = blockIdx.x, gs = 0;  // gs: the running stage count at the current item's stage 0
  WideItem cur = wide_prepare<kUp, kFp8, NW>(p, item, total, groups, nsc, rows, 0);
  __syncthreads();  // rows, mbarriers
#pragma unroll
  for (int s = 0; s < kWideStages - 1; ++s) wide_issue<kUp, kFp8, kDiag, NW>(p, cur, s, slot(gs + s), rows, bar(gs + s));
  while (cur.valid) {
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    for (int s = 0; s < nst; ++s) {
      // Ring stage gs + s is the (gs + s) / kWideStages-th use of its slot: its weights complete
      // that phase of the slot's mbarrier (every consumed stage was issued exactly once, in order).
      cp_wait<kWideStages - 2>();
      if constexpr (kDiag != kDiagMathOnly) mbar_wait(bar(gs + s), uint32_t((gs + s) / kWideStages) & 1u);
      fence_proxy_async();
      __syncthreads();  // stage s landed for every thread; every warp is done with stage s − 1
      wide_issue<kUp, kFp8, kDiag, NW>(p, cur, s + kWideStages - 1, slot(gs + s + kWideStages - 1), rows,
                                       bar(gs + s + kWideStages - 1));
      const uint8_t* st = slot(gs + s);
      if constexpr (kDiag != kDiagLoadOnly)
        wide_stage<kFp8, NW>(st + kWideAct + kWideScales + warp * kWideWarp, st, cur.ww, s, s == nst - 1, lane, acc);
    }
    cp_wait<0>();
    __syncthreads();  // the ring is free
    float* xbuf = reinterpret_cast<float*>(slot(gs + nst - 1));
    gs += nst;
    item += gridDim.x;
    const WideItem next = wide_prepare<kUp, kFp8, NW>(p, item, total, groups, nsc, rows, cur.rb ^ 1);
    __syncthreads();  // next's rows
#pragma unroll
    for (int s = 0; s < kWideStages - 1; ++s)
      wide_issue<kUp, kFp8, kDiag, NW>(p, next, s, slot(gs + s), rows, bar(gs + s));
    wide_epilogue<kUp, kFp8, NW>(p, cur, acc, xbuf);
    cur = next;
  }
}

}  // namespace dsv4::gpu::moe4
