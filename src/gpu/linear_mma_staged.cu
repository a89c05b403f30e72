// Shared-memory-staged tensor-core lin8 / bf16 dense linear for many rows (prefill, and decode
// batches above kStagedMinRows): the same bits as the register-fed tiles of linear_mma.cu.
//
// Why: the register-fed kernel gives each of its 8 warps one K chain (blocks kb ≡ w mod 8) of the
// whole CTA tile, so a warp holds every output of the tile and the tile stays small (≤ 32 × 32);
// each weight byte is then fetched and converted once per 32 rows. Here the CTA tile is 128
// outputs × 64 rows; each warp owns a 32 × 32 sub-tile and walks ALL eight chains itself, one
// after another (chain c = blocks c, c + 8, ... in increasing kb), keeping
//   lin8:  acc  += part·(s_x·s_w) per block (part: a fresh 8-step MMA chain), then at the end of
//          chain c: total = c == 0 ? acc : total + acc (fp32)   — the register kernel's warp sum;
//   dense: acc  = one MMA chain over the chain's blocks (hi, then lo when any lo ≠ 0), then
//          total = c == 0 ? double(acc) : total + double(acc)   — its double warp sum.
// Every MMA sees the same (a, b) pairs in the same k positions and order as the register kernel
// (linear_mma.cu's lane permutation: k16 step s, logical k 2t + e ← physical 32t + 4s + e and
// 8 + 2t + e ← 32t + 4s + 2 + e); the tiles are stored in shared memory in that logical order,
// so ldmatrix delivers the fragments. An MMA adding exact zeros (a lo pass over bf16-valued rows,
// an empty chain) leaves the accumulator's value unchanged, so whether it runs does not matter.
//
// Pipeline: per 128-K block the CTA loads the weight tile (128 × 128 values) and the x tile
// (64 × 128) from global memory into registers one block ahead, converts them (lin8: e4m3 → f16,
// exact; dense: weights as bf16, x → bf16 hi + lo) into the permuted layout of the other
// shared-memory stage, one barrier per block.
#include <mutex>
#include <type_traits>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_mma_common.cuh"
#include "gpu/pdl.cuh"

namespace dsv4::gpu::mma::detail {
namespace {

constexpr int kTileOut = 128, kTileRows = 64, kThreads = kWarps * 32;
constexpr int kRowWords = 64 + 4;  // a tile row of 128 16-bit values + 16 B pad (conflict-free ldmatrix)
constexpr int kOutWords = kTileOut * kRowWords, kRowsWords = kTileRows * kRowWords;

template <Wt WT>
__host__ __device__ constexpr int stage_words() {  // weights + x (dense: x hi and x lo)
  return kOutWords + (WT == Wt::kBf16 ? 2 : 1) * kRowsWords;
}
template <Wt WT>
__host__ __device__ constexpr int smem_bytes() {
  return 2 * stage_words<WT>() * 4;
}

// Global → register chunks of one block (16 B each): lin8 4 weight + 2 x chunks per thread,
// dense 8 + 8.
template <Wt WT>
struct Chunks {
  static constexpr int kW = WT == Wt::kFp8 ? 4 : 8, kX = WT == Wt::kFp8 ? 2 : 8;
  uint4 w[kW], x[kX];
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint32_t* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

template <Wt WT>
__device__ __forceinline__ void load_block(const Args& a, const TileArgs& ta, int64_t kb, Chunks<WT>& c) {
  const int tid = threadIdx.x;
  if (WT == Wt::kFp8) {
#pragma unroll
    for (int j = 0; j < Chunks<WT>::kW; ++j) {  // 128 rows × 8 chunks
      const int ch = tid + kThreads * j, row = ch >> 3, q = ch & 7;
      const int64_t o = min(ta.o0 + row, ta.o_end - 1);
      c.w[j] = ldg_weight(reinterpret_cast<const uint4*>(ta.w + o * a.in + kb * 128) + q);
    }
#pragma unroll
    for (int j = 0; j < Chunks<WT>::kX; ++j) {  // 64 rows × 8 chunks
      const int ch = tid + kThreads * j, row = ch >> 3, q = ch & 7;
      const int64_t r = min(ta.n0 + row, a.rows - 1) / a.x_row_div;
      c.x[j] = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.x) + r * a.in + kb * 128) + q);
    }
  } else {
#pragma unroll
    for (int j = 0; j < Chunks<WT>::kW; ++j) {  // 128 rows × 16 chunks
      const int ch = tid + kThreads * j, row = ch >> 4, q = ch & 15;
      const int64_t o = min(ta.o0 + row, ta.o_end - 1);
      c.w[j] = ldg_weight(reinterpret_cast<const uint4*>(ta.w + (o * a.in + kb * 128) * 2) + q);
    }
#pragma unroll
    for (int j = 0; j < Chunks<WT>::kX; ++j) {  // 64 rows × 32 float4
      const int ch = tid + kThreads * j, row = ch >> 5, q = ch & 31;
      const int64_t r = min(ta.n0 + row, a.rows - 1);
      const float* xr = static_cast<const float*>(a.x) + r * a.x_stride + ta.grp * a.in + kb * 128;
      c.x[j] = __ldg(reinterpret_cast<const uint4*>(xr) + q);
    }
  }
}

// The chunks into a stage in logical k order: physical 16-bit pair p of a row's block (values
// 2p, 2p + 1 = 32t + 4s + 2h, +1) goes to word 8s + t + 4h. Returns whether any x lo ≠ 0 (dense).
template <Wt WT>
__device__ __forceinline__ bool store_block(const Chunks<WT>& c, uint32_t* st) {
  const int tid = threadIdx.x;
  uint32_t* sw = st;
  uint32_t* sx = st + kOutWords;
  bool lo_any = false;
  if (WT == Wt::kFp8) {
    auto put = [](uint32_t* row, int q, const uint4& v) {  // 16 codes: physical k 16q .. 16q + 15
      const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // word p = 4q + i holds k 32t + 4s .. +3: t = p >> 3, s = p & 7
        const int p = 4 * q + i, t = p >> 3, s = p & 7;
        row[8 * s + t] = e4m3x2_to_f16x2(u[i]);
        row[8 * s + t + 4] = e4m3x2_to_f16x2(u[i] >> 16);
      }
    };
#pragma unroll
    for (int j = 0; j < Chunks<WT>::kW; ++j) {
      const int ch = tid + kThreads * j;
      put(sw + (ch >> 3) * kRowWords, ch & 7, c.w[j]);
    }
#pragma unroll
    for (int j = 0; j < Chunks<WT>::kX; ++j) {
      const int ch = tid + kThreads * j;
      put(sx + (ch >> 3) * kRowWords, ch & 7, c.x[j]);
    }
  } else {
    uint32_t* sl = sx + kRowsWords;
#pragma unroll
    for (int j = 0; j < Chunks<WT>::kW; ++j) {  // 8 bf16 = pairs p = 4q .. 4q + 3: t = p >> 4, s = (p >> 1) & 7
      const int ch = tid + kThreads * j, q = ch & 15;
      uint32_t* row = sw + (ch >> 4) * kRowWords;
      const uint32_t u[4] = {c.w[j].x, c.w[j].y, c.w[j].z, c.w[j].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int p = 4 * q + i;
        row[8 * ((p >> 1) & 7) + (p >> 4) + 4 * (p & 1)] = u[i];
      }
    }
#pragma unroll
    for (int j = 0; j < Chunks<WT>::kX; ++j) {  // float4 q = physical k 4q .. 4q + 3: t = q >> 3, s = q & 7
      const int ch = tid + kThreads * j, q = ch & 31, w0 = 8 * (q & 7) + (q >> 3);
      const int off = (ch >> 5) * kRowWords;
      const float4 v = *reinterpret_cast<const float4*>(&c.x[j]);
      const uint32_t h0 = pack_bf16(v.x, v.y), h1 = pack_bf16(v.z, v.w);
      const uint32_t l0 = pack_bf16(v.x - __uint_as_float(h0 << 16), v.y - __uint_as_float(h0 & 0xffff0000u));
      const uint32_t l1 = pack_bf16(v.z - __uint_as_float(h1 << 16), v.w - __uint_as_float(h1 & 0xffff0000u));
      sx[off + w0] = h0;
      sx[off + w0 + 4] = h1;
      sl[off + w0] = l0;
      sl[off + w0 + 4] = l1;
      lo_any |= (l0 | l1) != 0u;
    }
  }
  return lo_any;
}

// Warp (wo, wr) owns outputs [32·wo, +32) (m-tiles 2wo, 2wo + 1) and rows [32·wr, +32) (n-fragments
// 4wr .. 4wr + 3) of the CTA tile.
template <Wt WT>
__global__ void __launch_bounds__(kThreads, 1) staged_linear_kernel(Args a) {
  extern __shared__ __align__(16) uint32_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int wo = warp & 3, wr = warp >> 2;
  const TileArgs ta = resolve_tile(a, kTileOut, kTileRows);
  const int64_t kblocks = a.in / 128;
  const int64_t srow = (ta.o0 / 128) * kblocks;  // lin8: the tile's weight-scale row (128-aligned tile)

  pdl_wait();
  pdl_trigger();

  // Per-thread output rows of the D fragments (lin8 activation scales).
  const float* sxp[4][2];
  if (WT == Wt::kFp8) {
#pragma unroll
    for (int nf = 0; nf < 4; ++nf)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t r = min(ta.n0 + (4 * wr + nf) * 8 + 2 * t + j, a.rows - 1);
        sxp[nf][j] = a.xs + (r / a.x_row_div) * kblocks;
      }
  }
  // ldmatrix row addresses (words) inside a stage, step 0.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 4;
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 4;
  const int a_off = (wo * 32 + a_row) * kRowWords + a_col;
  const int b_off = kOutWords + (wr * 32 + b_row) * kRowWords + b_col;

  using Total = std::conditional_t<WT == Wt::kFp8, float, double>;
  float acc[2][4][4] = {};
  Total total[2][4][4] = {};
  Chunks<WT> ch;
  load_block<WT>(a, ta, 0, ch);
  bool lo_flag[2];
  lo_flag[0] = __syncthreads_or(store_block<WT>(ch, smem)) != 0;
  int buf = 0;
#pragma unroll 1
  for (int c = 0; c < kWarps; ++c) {
#pragma unroll 1
    for (int64_t kb = c; kb < kblocks; kb += kWarps) {
      const int64_t nk = kb + kWarps < kblocks ? kb + kWarps : (c + 1 < kWarps && c + 1 < kblocks ? c + 1 : -1);
      if (nk >= 0) load_block<WT>(a, ta, nk, ch);
      const uint32_t* st = smem + buf * stage_words<WT>();
      float part[2][4][4] = {};
      float (&dst)[2][4][4] = WT == Wt::kFp8 ? part : acc;
      const bool lo = WT == Wt::kBf16 && lo_flag[buf];
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        uint32_t af[2][4], bf[2][4], bl[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) ldmatrix_x4(af[mt], st + a_off + mt * 16 * kRowWords + 8 * s);
#pragma unroll
        for (int np = 0; np < 2; ++np) ldmatrix_x4(bf[np], st + b_off + np * 16 * kRowWords + 8 * s);
        if (lo) {
#pragma unroll
          for (int np = 0; np < 2; ++np) ldmatrix_x4(bl[np], st + kRowsWords + b_off + np * 16 * kRowWords + 8 * s);
        }
#pragma unroll
        for (int nf = 0; nf < 4; ++nf) {
          const uint32_t b0 = bf[nf >> 1][2 * (nf & 1)], b1 = bf[nf >> 1][2 * (nf & 1) + 1];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            if (WT == Wt::kFp8) {
              mma_f16(dst[mt][nf], af[mt], b0, b1);
            } else {
              mma_bf16(dst[mt][nf], af[mt], b0, b1);
              if (lo) mma_bf16(dst[mt][nf], af[mt], bl[nf >> 1][2 * (nf & 1)], bl[nf >> 1][2 * (nf & 1) + 1]);
            }
          }
        }
      }
      if (WT == Wt::kFp8) {
        const float sw = e8m0_to_float(__ldg(ta.ws + srow + kb));
        float sx[4][2];
#pragma unroll
        for (int nf = 0; nf < 4; ++nf)
#pragma unroll
          for (int j = 0; j < 2; ++j) sx[nf][j] = __ldg(sxp[nf][j] + kb);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nf = 0; nf < 4; ++nf)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nf][e] = acc[mt][nf][e] + part[mt][nf][e] * (sx[nf][e & 1] * sw);
      }
      bool stored_lo = false;
      if (nk >= 0) stored_lo = store_block<WT>(ch, smem + (buf ^ 1) * stage_words<WT>());
      lo_flag[buf ^ 1] = __syncthreads_or(stored_lo) != 0;
      buf ^= 1;
    }
    // End of chain c (empty chains add zeros, as the register kernel's idle warps do).
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nf = 0; nf < 4; ++nf)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (WT == Wt::kFp8) total[mt][nf][e] = c == 0 ? acc[mt][nf][e] : total[mt][nf][e] + acc[mt][nf][e];
          else total[mt][nf][e] = c == 0 ? Total(acc[mt][nf][e]) : total[mt][nf][e] + Total(acc[mt][nf][e]);
          acc[mt][nf][e] = 0.0f;
        }
  }

  // D fragment: e = 0, 1 → (output g, rows 2t, 2t + 1); e = 2, 3 → output g + 8.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nf = 0; nf < 4; ++nf)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t o = ta.o0 + wo * 32 + mt * 16 + g + 8 * (e >> 1);
        const int64_t r = ta.n0 + (4 * wr + nf) * 8 + 2 * t + (e & 1);
        if (o >= ta.o_end || r >= a.rows) continue;
        float v;
        if (WT == Wt::kFp8) {
          v = ta.round ? round_bf16(float(total[mt][nf][e])) : float(total[mt][nf][e]);
        } else {
          v = float(total[mt][nf][e]);
          if (ta.round) v = round_bf16(v);
          if (ta.post_scale != 0.0f) v = round_bf16(v * ta.post_scale);
        }
        ta.y[r * ta.out + o] = v;
      }
}

}  // namespace

int64_t staged_ctas(const Args& a) { return output_tile_rows(a, kTileOut) * ceil_tiles(a.rows, kTileRows); }

template <Wt WT>
bool launch_staged(const Args& a0, cudaStream_t s) {
  Args a = a0;
  dim3 grid;
  if (!tiled_grid(a, kTileOut, kTileRows, grid)) return false;
  static std::once_flag attr_set[kMaxDevices];  // cudaFuncSetAttribute is per device
  call_once_per_device(attr_set, [] {
    CUDA_CHECK(cudaFuncSetAttribute(staged_linear_kernel<WT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    smem_bytes<WT>()));
  });
  launch_pdl(staged_linear_kernel<WT>, grid, kThreads, size_t(smem_bytes<WT>()), s, a);
  return true;
}

template bool launch_staged<Wt::kFp8>(const Args&, cudaStream_t);
template bool launch_staged<Wt::kBf16>(const Args&, cudaStream_t);

}  // namespace dsv4::gpu::mma::detail
