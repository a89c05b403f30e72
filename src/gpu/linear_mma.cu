// The register-fed tensor-core tiles of lin8 / bf16 dense linears, every row count (contract:
// linear_mma.h; which kernel takes a call: linear_mma_dispatch.cu).
//
// MMA roles: weights are the A side (16 output rows per m-tile), activations the B side (8 rows
// per n-fragment), D[o][r] accumulates in fp32. A CTA (8 warps) owns MT m-tiles × NF n-fragments
// of the output; warp w walks the 128-wide K blocks w, w + 8, ... (all warps share the tile), so
// a weight byte is read once per CTA and small-M calls still spread K over 8 warps × out/16 CTAs.
// The eight warp accumulators meet in shared memory and add in warp order (linear_mma.h).
//
// Lane layout inside a K block: lane (g = lane/4, t = lane%4) owns bytes [32t, 32t+32) of its
// rows (32 values: 32 bytes of e4m3 or 64 of bf16), loaded as 16-byte vectors. k16 step s
// (0..7) feeds the MMA's logical k {2t, 2t+1} from physical k 32t+4s+{0,1} (bf16: the same
// positions) and {2t+8, 2t+9} from 32t+4s+{2,3}; A and B use the same map, so each block's sum
// is the same set of products in a fixed hardware order. Rows beyond `rows` / `out` read a
// clamped valid row and are never stored.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_mma.h"
#include "gpu/linear_mma_common.cuh"
#include "gpu/pdl.cuh"

namespace dsv4::gpu::mma {
namespace {

using namespace detail;

// MT m-tiles (16 output rows each) × NF n-fragments (8 input rows each) per CTA; KU K blocks per
// warp loaded before any is consumed (bytes in flight for decode sizes); MINB CTAs per SM (the
// register cap). Dense (except the 16 × 8 tile, which keeps one x load per k16 step): fragment
// outer, the fragment's x loaded once per block, XA: the next fragment's x loaded while this one
// computes. lin8 ignores XA.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Warp w's first kPrefetchBlocks K blocks (kb = w, w + 8, ...) of the weight rows it reads, pulled
// into L2 before pdl_wait (a hint: no effect on results).
constexpr int kPrefetchBlocks = 8;

template <Wt WT, int MT, int NF, int KU, int MINB, bool XA>
__global__ void __launch_bounds__(kWarps * 32, MINB) mma_linear_kernel(Args a) {
  constexpr int ES = WT == Wt::kBf16 ? 2 : 1;     // weight bytes per value
  constexpr int AV = WT == Wt::kBf16 ? 4 : 2;     // 16-byte vectors per row per lane per block
  // Cross-warp sums in passes of NP n-fragments (static shared memory stays ≤ 32 KB).
  constexpr int NP = MT * NF > 8 ? 8 / MT : NF;
  __shared__ float red[kWarps][NP * 8][MT * 16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t n0 = int64_t(blockIdx.x) * (NF * 8);
  int64_t by = blockIdx.y;
  if (a.nseg > 0) {  // this tile's segment
    by = take_tile_segment(a, by, [&](const Args::Seg& sg, int) {
      a.w = sg.w;
      a.ws = sg.ws;
      a.out = a.opg = sg.out;
      a.y = sg.y;
      a.round = sg.round;
      a.post_scale = sg.post_scale;
    });
    a.tiles_per_group = (a.opg + MT * 16 - 1) / (MT * 16);
  }
  const int64_t grp = by / a.tiles_per_group, tile = by % a.tiles_per_group;
  const int64_t o0 = grp * a.opg + tile * (MT * 16), o_end = (grp + 1) * a.opg;
  const int64_t kblocks = a.in / 128;

  const unsigned char* wr[MT][2];
  int64_t srow[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t o = min(o0 + mt * 16 + g + 8 * h, o_end - 1);
      wr[mt][h] = static_cast<const unsigned char*>(a.w) + (o * a.in + 32 * t) * ES;
    }
    srow[mt] = (min(o0 + mt * 16, o_end - 1) / 128) * kblocks;
  }
  // Weights are never written by earlier work on the stream: under programmatic dependent launch
  // their first blocks stream into L2 while the predecessor finishes (lanes t of a row cover its
  // 128-byte lines). Activations are only read after pdl_wait.
#pragma unroll 1
  for (int u = 0; u < (a.prefetch ? kPrefetchBlocks : 0); ++u) {
    const int64_t kb = warp + int64_t(kWarps) * u;
    if (kb >= kblocks) break;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) prefetch_l2(wr[mt][h] + kb * 128 * ES);
  }
  pdl_wait();
  pdl_trigger();
  const void* xb[NF];
  const float* sxp[NF][2];
#pragma unroll
  for (int nf = 0; nf < NF; ++nf) {
    const int64_t r = min(n0 + nf * 8 + g, a.rows - 1);
    if (WT == Wt::kFp8) {
      xb[nf] = static_cast<const uint8_t*>(a.x) + (r / a.x_row_div) * a.in + 32 * t;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t rc = min(n0 + nf * 8 + 2 * t + j, a.rows - 1);
        sxp[nf][j] = a.xs + (rc / a.x_row_div) * kblocks;
      }
    } else {
      xb[nf] = static_cast<const float*>(a.x) + r * a.x_stride + grp * a.in + 32 * t;
    }
  }

  // kFp8AsBf16 with x16: fragment nf reads its activations from x16 when all its rows are bf16 values.
  const uint16_t* xb16[NF];
  bool x16_on[NF];
#pragma unroll
  for (int nf = 0; nf < NF; ++nf) {
    const int64_t r = min(n0 + nf * 8 + g, a.rows - 1);
    xb16[nf] = a.x16 + r * a.x_stride + grp * a.in + 32 * t;
    x16_on[nf] = false;
    if (WT == Wt::kFp8AsBf16 && a.x16 != nullptr) {  // warp-uniform; the flag blocks over the group's values
      const int64_t per_row = (a.x_stride + a.x16_flag_values - 1) / a.x16_flag_values;
      bool ok = true;
      for (int64_t c = grp * a.in / a.x16_flag_values; c <= ((grp + 1) * a.in - 1) / a.x16_flag_values; ++c)
        ok = ok && a.x16_ok[r * per_row + c] != 0;
      x16_on[nf] = __all_sync(0xffffffffu, ok);
    }
  }

  bool nf_on[NF];  // warp-uniform: fragment nf holds at least one real row (dense skips the others)
#pragma unroll
  for (int nf = 0; nf < NF; ++nf) nf_on[nf] = n0 + nf * 8 < a.rows;

  float acc[MT][NF][4] = {};
  int e_cur[MT];  // kFp8AsBf16: the E8M0 exponent acc[mt] is in units of (−1: no block yet)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) e_cur[mt] = -1;

#pragma unroll 1
  for (int64_t kb0 = warp; kb0 < kblocks; kb0 += kWarps * KU) {
    uint4 av[KU][MT][2][AV];
    uint4 xv[KU][NF][2];  // lin8 activations
#pragma unroll
    for (int u = 0; u < KU; ++u) {
      const int64_t kb = kb0 + int64_t(kWarps) * u;
      if (kb < kblocks) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int i = 0; i < AV; ++i)
              av[u][mt][h][i] = ldg_weight(reinterpret_cast<const uint4*>(wr[mt][h] + kb * 128 * ES) + i);
        if (WT == Wt::kFp8) {
#pragma unroll
          for (int nf = 0; nf < NF; ++nf)
#pragma unroll
            for (int i = 0; i < 2; ++i)
              xv[u][nf][i] = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(xb[nf]) + kb * 128) + i);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < KU; ++u) {
      const int64_t kb = kb0 + int64_t(kWarps) * u;
      if (kb >= kblocks) break;  // warp-uniform
      if (WT == Wt::kFp8) {
        float part[MT][NF][4] = {};  // a fresh chain per 128-wide block
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          uint32_t af[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint32_t w0 = word(av[u][mt][0], s), w1 = word(av[u][mt][1], s);
            af[mt][0] = e4m3x2_to_f16x2(w0);
            af[mt][1] = e4m3x2_to_f16x2(w1);
            af[mt][2] = e4m3x2_to_f16x2(w0 >> 16);
            af[mt][3] = e4m3x2_to_f16x2(w1 >> 16);
          }
#pragma unroll
          for (int nf = 0; nf < NF; ++nf) {
            const uint32_t xw = word(xv[u][nf], s);
            const uint32_t b0 = e4m3x2_to_f16x2(xw), b1 = e4m3x2_to_f16x2(xw >> 16);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) mma_f16(part[mt][nf], af[mt], b0, b1);
          }
        }
        float sw[MT], sx[NF][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) sw[mt] = e8m0_to_float(__ldg(a.ws + srow[mt] + kb));
#pragma unroll
        for (int nf = 0; nf < NF; ++nf)
#pragma unroll
          for (int j = 0; j < 2; ++j) sx[nf][j] = __ldg(sxp[nf][j] + kb);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nf = 0; nf < NF; ++nf)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nf][e] = acc[mt][nf][e] + part[mt][nf][e] * (sx[nf][e & 1] * sw[mt]);
      } else if (WT == Wt::kFp8AsBf16) {
        // The weights enter the MMA as their e4m3 values (exact in f16 and bf16) and the
        // accumulator is kept in units of the current block's tile scale: at a block whose scale
        // differs it is multiplied by 2^(e_old − e_new), exact while it stays a normal fp32 value.
        // An MMA's fp32 result scales exactly with its inputs (the same aligned sum, shifted), so
        // every accumulator ends with the bits of the widened bf16 weight's MMA chain.
        // The weights enter as bf16 (exact); the activations come from x16 where it is given and
        // flagged, else from x split as the dense path splits it. Each accumulator sees steps
        // 0..7 of each block in order, as on the dense path.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int e = __ldg(a.ws + srow[mt] + kb);
          if (e != e_cur[mt]) {
            if (e_cur[mt] >= 0) {
#pragma unroll
              for (int nf = 0; nf < NF; ++nf)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[mt][nf][q] = ldexpf(acc[mt][nf][q], e_cur[mt] - e);
            }
            e_cur[mt] = e;
          }
        }
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) {
          if (!nf_on[nf]) continue;  // warp-uniform
          if (x16_on[nf]) {  // the block's 32 values of the lane's row, as bf16 pairs: 64 bytes
            uint4 xw[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) xw[q] = __ldg(reinterpret_cast<const uint4*>(xb16[nf] + kb * 128) + q);
#pragma unroll
            for (int s = 0; s < 8; ++s)
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                const uint32_t w0 = word(av[u][mt][0], s), w1 = word(av[u][mt][1], s);
                const uint32_t ab[4] = {e4m3x2_to_bf16x2(w0), e4m3x2_to_bf16x2(w1), e4m3x2_to_bf16x2(w0 >> 16),
                                        e4m3x2_to_bf16x2(w1 >> 16)};
                mma_bf16(acc[mt][nf], ab, word(xw, 2 * s), word(xw, 2 * s + 1));
              }
            continue;
          }
#pragma unroll
          for (int s = 0; s < 8; ++s) {  // x as the dense path splits it: bf16 hi + lo
            const float4 v = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(xb[nf]) + kb * 128) + s);
            const uint32_t h0 = pack_bf16(v.x, v.y), h1 = pack_bf16(v.z, v.w);
            const uint32_t l0 = pack_bf16(v.x - __uint_as_float(h0 << 16), v.y - __uint_as_float(h0 & 0xffff0000u));
            const uint32_t l1 = pack_bf16(v.z - __uint_as_float(h1 << 16), v.w - __uint_as_float(h1 & 0xffff0000u));
            const bool lo = __any_sync(0xffffffffu, (l0 | l1) != 0u);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              const uint32_t w0 = word(av[u][mt][0], s), w1 = word(av[u][mt][1], s);
              const uint32_t ab[4] = {e4m3x2_to_bf16x2(w0), e4m3x2_to_bf16x2(w1), e4m3x2_to_bf16x2(w0 >> 16),
                                      e4m3x2_to_bf16x2(w1 >> 16)};
              mma_bf16(acc[mt][nf], ab, h0, h1);
              if (lo) mma_bf16(acc[mt][nf], ab, l0, l1);
            }
          }
        }
      } else if (MT == 1 && NF == 1 && !XA) {
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          const float4 v = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(xb[0]) + kb * 128) + s);
          const uint32_t h0 = pack_bf16(v.x, v.y), h1 = pack_bf16(v.z, v.w);
          const uint32_t l0 = pack_bf16(v.x - __uint_as_float(h0 << 16), v.y - __uint_as_float(h0 & 0xffff0000u));
          const uint32_t l1 = pack_bf16(v.z - __uint_as_float(h1 << 16), v.w - __uint_as_float(h1 & 0xffff0000u));
          // bf16-valued activations (every model call) have lo == +0 exactly: that MMA would add
          // exact zeros to the accumulator, so the warp skips it (same bits, half the MMAs).
          const bool lo = __any_sync(0xffffffffu, (l0 | l1) != 0u);
          const uint32_t af[4] = {word(av[u][0][0], 2 * s), word(av[u][0][1], 2 * s), word(av[u][0][0], 2 * s + 1),
                                  word(av[u][0][1], 2 * s + 1)};
          mma_bf16(acc[0][0], af, h0, h1);
          if (lo) mma_bf16(acc[0][0], af, l0, l1);
        }
      } else {
        // nf outer, k16 steps inner: each accumulator still sees steps s = 0..7 of each block in
        // order (the same MMA sequence per element); the fragment's eight float4 of x are loaded
        // together, one L2 round trip per block instead of one per step (XA: the next fragment's
        // while this one computes).
        constexpr bool kPrefetch = XA && NF > 1;
        float4 xr2[kPrefetch ? 2 : 1][8];
        auto load_x = [&](int nf, float4 (&dst)[8]) {
          const float4* xp = reinterpret_cast<const float4*>(static_cast<const float*>(xb[nf]) + kb * 128);
#pragma unroll
          for (int s = 0; s < 8; ++s) dst[s] = __ldg(xp + s);
        };
        if (kPrefetch) load_x(0, xr2[0]);  // fragment 0 always holds a row
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) {
          if (!nf_on[nf]) continue;  // warp-uniform
          if (kPrefetch) {
            if (nf + 1 < NF && nf_on[nf + 1]) load_x(nf + 1, xr2[(nf + 1) & 1]);
          } else {
            load_x(nf, xr2[0]);
          }
          const float4(&xr)[8] = xr2[kPrefetch ? nf & 1 : 0];
#pragma unroll
          for (int s = 0; s < 8; ++s) {
            const float4 v = xr[s];
            const uint32_t h0 = pack_bf16(v.x, v.y), h1 = pack_bf16(v.z, v.w);
            const uint32_t l0 = pack_bf16(v.x - __uint_as_float(h0 << 16), v.y - __uint_as_float(h0 & 0xffff0000u));
            const uint32_t l1 = pack_bf16(v.z - __uint_as_float(h1 << 16), v.w - __uint_as_float(h1 & 0xffff0000u));
            const bool lo = __any_sync(0xffffffffu, (l0 | l1) != 0u);  // as above
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              const uint32_t af[4] = {word(av[u][mt][0], 2 * s), word(av[u][mt][1], 2 * s),
                                      word(av[u][mt][0], 2 * s + 1), word(av[u][mt][1], 2 * s + 1)};
              mma_bf16(acc[mt][nf], af, h0, h1);
              if (lo) mma_bf16(acc[mt][nf], af, l0, l1);
            }
          }
        }
      }
    }
  }

  if (WT == Wt::kFp8AsBf16) {  // back from units of the last block's scale (exact, as above)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      if (e_cur[mt] >= 0)
#pragma unroll
        for (int nf = 0; nf < NF; ++nf)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[mt][nf][q] = ldexpf(acc[mt][nf][q], e_cur[mt] - 127);
  }

  // D fragment: e = 0,1 → (row g, cols 2t, 2t+1); e = 2,3 → row g + 8.
#pragma unroll
  for (int p0 = 0; p0 < NF; p0 += NP) {
    if (p0 > 0) __syncthreads();  // the previous pass has read red
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NP; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[warp][j * 8 + 2 * t + (e & 1)][mt * 16 + g + 8 * (e >> 1)] = acc[mt][p0 + j][e];
    __syncthreads();
    for (int i = threadIdx.x; i < MT * 16 * NP * 8; i += kWarps * 32) {
      const int ol = i % (MT * 16), nl = i / (MT * 16);
      const int64_t o = o0 + ol, r = n0 + p0 * 8 + nl;
      if (o >= o_end || r >= a.rows) continue;
      float v;
      if (WT == Wt::kFp8) {
        float sum = red[0][nl][ol];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) sum = sum + red[w][nl][ol];
        v = a.round ? round_bf16(sum) : sum;
      } else {
        double sum = red[0][nl][ol];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) sum += double(red[w][nl][ol]);
        v = float(sum);
        if (a.round) v = round_bf16(v);
        if (a.post_scale != 0.0f) v = round_bf16(v * a.post_scale);
      }
      a.y[r * a.out + o] = v;
    }
  }
}

template <Wt WT, int MT, int NF, int KU, int MINB, bool XA = false>
bool launch(Args a, cudaStream_t s) {
  a.tiles_per_group = ceil_tiles(a.opg, MT * 16);
  set_segment_tile0(a, MT * 16);
  const int64_t gy = output_tile_rows(a, MT * 16), gx = ceil_tiles(a.rows, NF * 8);
  if (gy > 65535 || gx > (int64_t{1} << 30)) return false;
  a.prefetch = pdl_enabled();  // without PDL there is no predecessor tail to overlap
  auto* kernel = mma_linear_kernel<WT, MT, NF, KU, MINB, XA>;
  launch_pdl(kernel, dim3(unsigned(gx), unsigned(gy)), kWarps * 32, 0, s, a);
  return true;
}

// The tile configurations (index = force_tile's argument). Any of them gives the same bits.
struct Tile {
  int mt, nf, ku, minb;
  bool xa;  // dense: next fragment's x ahead (lin8 ignores it)
};
constexpr Tile kTiles[] = {{1, 1, 2, 2, false}, {1, 2, 2, 2, false}, {1, 2, 1, 2, false}, {1, 4, 1, 2, false},
                           {2, 4, 1, 1, false}, {2, 2, 1, 2, false}, {1, 4, 2, 1, false}, {4, 2, 1, 1, false},
                           {2, 8, 1, 1, true},  {2, 4, 1, 1, true},  {4, 2, 1, 1, true},  {2, 1, 2, 1, false},
                           {1, 1, 1, 4, false}, {1, 1, 1, 3, false}};
static_assert(sizeof(kTiles) / sizeof(kTiles[0]) == kRegisterTiles, "linear_mma_common.cuh counts the tiles");

template <Wt WT>
bool launch_tile(int i, const Args& a, cudaStream_t s) {
  constexpr bool X = WT == Wt::kBf16;  // only the bf16 dense path has an XA variant: one instantiation
  switch (i) {
    case 0: return launch<WT, 1, 1, 2, 2>(a, s);
    case 1: return launch<WT, 1, 2, 2, 2>(a, s);
    case 2: return launch<WT, 1, 2, 1, 2>(a, s);
    case 3: return launch<WT, 1, 4, 1, 2>(a, s);
    case 4: return launch<WT, 2, 4, 1, 1>(a, s);
    case 5: return launch<WT, 2, 2, 1, 2>(a, s);
    case 6: return launch<WT, 1, 4, 2, 1>(a, s);
    case 7: return launch<WT, 4, 2, 1, 1>(a, s);
    case 8: return launch<WT, 2, 8, 1, 1, X>(a, s);
    case 9: return launch<WT, 2, 4, 1, 1, X>(a, s);
    case 10: return launch<WT, 4, 2, 1, 1, X>(a, s);
    case 11: return launch<WT, 2, 1, 2, 1>(a, s);
    case 12: return launch<WT, 1, 1, 1, 4>(a, s);
    default: return launch<WT, 1, 1, 1, 3>(a, s);
  }
}

// A tile of MT·16 output rows must not straddle a group of a grouped call.
bool tile_fits(const Tile& t, const Args& a) { return tiles_fit_groups(a, t.mt * 16); }

// CTAs a tile launches for the call.
int64_t ctas(const Tile& t, const Args& a) { return output_tile_rows(a, t.mt * 16) * ceil_tiles(a.rows, t.nf * 8); }

// Tile choice (any choice gives the same bits; docs/decode-linears.md, round 4, has the sweep it
// comes from). Decode sizes take the first tile of a preference list (most reuse of each loaded
// weight and x fragment first) that launches enough CTAs, else the one launching the most.
// Prefill: 32 × 32 tiles (lin8; dense above 512 rows), 64 × 16 (dense, 65..512 rows).
template <Wt WT>
int choose_tile(const Args& a) {
  if (a.rows > 64) {
    if (WT != Wt::kFp8 && a.rows <= 512 && tile_fits(kTiles[7], a)) return 7;
    return tile_fits(kTiles[4], a) ? 4 : 3;
  }
  // lin8 up to 8 rows: 16 × 8 tiles, two K blocks in flight per warp; with in ≤ 1024 a warp has
  // one K block, so four CTAs per SM (64 registers) keep more bytes in flight instead (H200,
  // gpu_linear_bench: wq_b 16384 × 1024 M = 1 11.5 → 8.9 µs). Dense (1,1) tiles run three CTAs
  // per SM (compressor 1024 × 4096 M = 1 8.8 → 7.6 µs, gate 256 × 4096 7.5 → 6.8).
  if (WT == Wt::kFp8 && a.rows <= 8) return a.in <= 1024 ? 12 : 0;
  // e4m3-as-bf16 (wo_a): the fastest tiles by rows for the decode step's form (x's bf16 copy) in a
  // sweep of gpu_linear_bench "wo_a fp8" on H200 (docs/decode-linears.md, round 11).
  if (WT == Wt::kFp8AsBf16) {
    const int pick = a.rows <= 8 ? 2 : 5;
    if (tile_fits(kTiles[pick], a)) return pick;
  }
  static constexpr int kLin8[] = {5, 2, 0}, kDense[] = {7, 9, 5, 2, 13};
  const int* order = WT == Wt::kFp8 ? kLin8 : kDense;
  const int n = WT == Wt::kFp8 ? 3 : 5;
  const int64_t enough = WT == Wt::kFp8 ? 192 : 80;
  int best = -1;
  for (int j = 0; j < n; ++j) {
    const Tile& t = kTiles[order[j]];
    if (!tile_fits(t, a)) continue;
    if (ctas(t, a) >= enough) return order[j];
    if (best < 0 || ctas(t, a) >= ctas(kTiles[best], a)) best = order[j];
  }
  return best;
}

}  // namespace

namespace detail {

template <Wt WT>
bool launch_register_tile(int i, const Args& a, cudaStream_t s) {
  return launch_tile<WT>(i, a, s);
}
bool register_tile_fits(int i, const Args& a) { return tile_fits(kTiles[i], a); }
template <Wt WT>
int choose_register_tile(const Args& a) {
  return choose_tile<WT>(a);
}
template bool launch_register_tile<Wt::kFp8>(int, const Args&, cudaStream_t);
template bool launch_register_tile<Wt::kBf16>(int, const Args&, cudaStream_t);
template bool launch_register_tile<Wt::kFp8AsBf16>(int, const Args&, cudaStream_t);
template int choose_register_tile<Wt::kFp8>(const Args&);
template int choose_register_tile<Wt::kBf16>(const Args&);
template int choose_register_tile<Wt::kFp8AsBf16>(const Args&);

}  // namespace detail
}  // namespace dsv4::gpu::mma
