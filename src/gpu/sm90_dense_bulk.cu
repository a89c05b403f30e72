// The bf16 dense linear for many rows (prefill: wo_a on its widened weight, the compressor and
// indexer projections) on sm_90a warpgroup MMAs fed by bulk copies of pre-converted tiles, as
// sm90_lin8_bulk.cu does for lin8: the same bits as the register-fed and staged kernels
// (linear_mma.h numerics).
//
// The dense arithmetic: x fp32 is split into bf16 hi + lo; per warp chain c (blocks c, c + 8, …
// in increasing kb) one fp32 MMA chain over the chain's blocks — per k16 step the hi MMA, then the
// lo MMA when any lo of the block is nonzero (an MMA adding exact zeros changes nothing) — and
// total = c == 0 ? double(acc) : total + double(acc); the output is float(total), then the
// optional bf16 rounding and post_scale. The k16 steps take the block's values in the permuted
// order the register kernels' fragments use: step k of half η = k / 4 holds, as its pairs
// 4C + i (C = 0..7 over the two 16-byte chunks of the step, i = 0..3), the physical pair at
// 32i + 16η + 2C (sm90_linear_wgmma.cu's probe: chained `wgmma m64nNk16` over the same values in
// the same k positions give the mma.sync chains' bits; bf16 checked by the forced-tile tests).
//
// Conversion pass (one launch for x, one per weight): weight rows → bf16 tiles, x rows → hi and lo
// tiles of every group's slice and a per-(group, row tile, block) flag "some lo ≠ 0". Main kernel:
// CTA tile 128 outputs × 128 rows, 8 consumer warps (255 registers: acc 64 fp32 + total 64
// doubles), 2 stages of 96 KB (weights, hi, lo; the lo copy only for flagged blocks), the last
// warp done with a stage refills it with cp.async.bulk onto the stage's mbarrier.
#include <mutex>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_mma_common.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_wgmma_common.cuh"

namespace dsv4::gpu::mma::detail {
namespace {

using namespace wgmma;

constexpr int kTile = 128;                        // outputs and rows of a CTA tile
constexpr int kThreads = 256, kConsumers = 256;   // 8 warps: 255 registers a thread
constexpr int kTileBytes = kTile * 256;            // 128 rows × 128 bf16: two 16 KB swizzle atoms
constexpr int kStageBytes = 3 * kTileBytes;        // weights, x hi, x lo
constexpr int kStages = 2;
constexpr int kSmem = 1024 + kStages * kStageBytes + 64;
static_assert(kSmem <= 232448, "over the sm_90 shared-memory limit");

// Weight rows [0, tiles·128) of w (bf16 [valid, in]) into tiles: tile T, block kb at
// dst + (T·kblocks + kb)·kTileBytes. Item (row, block, chunk C): chunk C = 8η + C' holds words
// (pairs) at physical k 32i + 16η + 2C', i = 0..3. Rows ≥ valid are zeros.
__global__ void dense_w_tiles_kernel(const uint16_t* __restrict__ w, int64_t valid, int64_t in, int64_t tiles,
                                     uint8_t* __restrict__ dst) {
  pdl_wait();
  pdl_trigger();
  const int64_t kblocks = in / 128, rows = tiles * kTile, total = rows * kblocks * 16;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int C = int(i & 15);
    const int64_t r = (i >> 4) % rows, kb = (i >> 4) / rows;
    const int eta = C >> 3, cc = C & 7;
    uint32_t o[4] = {0u, 0u, 0u, 0u};
    if (r < valid) {
      const uint32_t* src = reinterpret_cast<const uint32_t*>(w + r * in + kb * 128);
#pragma unroll
      for (int q = 0; q < 4; ++q) o[q] = __ldg(src + 16 * q + 8 * eta + cc);  // pair at 32q + 16η + 2cc
    }
    *reinterpret_cast<uint4*>(dst + ((r / kTile) * kblocks + kb) * kTileBytes + sw128_chunk_offset(kTile, int(r % kTile), C)) =
        make_uint4(o[0], o[1], o[2], o[3]);
  }
}

// x (fp32 [valid, x_stride], group g's slice at g·in) into hi and lo bf16 tiles: group g, tile
// T, block kb at hi/lo + ((g·tiles + T)·kblocks + kb)·kTileBytes, and lo_flag[(g·tiles + T)·kblocks
// + kb] |= some lo ≠ 0 (zeroed by the launcher). Rows ≥ valid are zeros.
__global__ void dense_x_tiles_kernel(const float* __restrict__ x, int64_t valid, int64_t x_stride, int64_t in,
                                     int64_t groups, int64_t tiles, uint8_t* __restrict__ hi,
                                     uint8_t* __restrict__ lo, int32_t* __restrict__ lo_flag) {
  pdl_wait();
  pdl_trigger();
  const int64_t kblocks = in / 128, rows = tiles * kTile, total = groups * rows * kblocks * 16;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int C = int(i & 15);
    const int64_t r = (i >> 4) % rows, rest = (i >> 4) / rows, kb = rest % kblocks, g = rest / kblocks;
    uint32_t h[4] = {0u, 0u, 0u, 0u}, l[4] = {0u, 0u, 0u, 0u};
    const bool any = r < valid && dense_x_chunk(x + r * x_stride + g * in + kb * 128, C, h, l);
    const int64_t tile = (g * tiles + r / kTile) * kblocks + kb;
    const int off = sw128_chunk_offset(kTile, int(r % kTile), C);
    *reinterpret_cast<uint4*>(hi + tile * kTileBytes + off) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4*>(lo + tile * kTileBytes + off) = make_uint4(l[0], l[1], l[2], l[3]);
    // A warp's 32 items are two rows of one tile and block (16 · rows per item group, rows even).
    if (__any_sync(0xffffffffu, any) && (threadIdx.x & 31) == 0) atomicOr(lo_flag + tile, 1);
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    dense_bulk_kernel(Args a, const uint8_t* __restrict__ wp, const uint8_t* __restrict__ hip,
                      const uint8_t* __restrict__ lop, const int32_t* __restrict__ lo_flag, int64_t rtiles) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* stages = smem_1024(smem_raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + kStages * kStageBytes);
  int* released = reinterpret_cast<int*>(full + kStages);  // warps done with a stage's block
  int* lo_on = released + kStages;                          // the stage's block has lo values
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const TileArgs ta = resolve_tile(a, kTile, kTile);
  const int kblocks = int(a.in / 128);
  const int64_t xt0 = (ta.grp * rtiles + blockIdx.x) * kblocks;  // the row tile's first block
  const uint8_t* wsrc = wp + int64_t(blockIdx.y) * kblocks * kTileBytes;
  // Block n (chain order) into stage n % kStages: its lo flag, the expected bytes, the copies.
  auto fetch = [&](int n) {
    const int s = n % kStages;
    const int kb = chain_block32(n, kblocks);
    uint8_t* st = stages + s * kStageBytes;
    const bool lo = lo_flag[xt0 + kb] != 0;
    lo_on[s] = lo;
    mbar_expect_tx(full + s, (lo ? 3 : 2) * kTileBytes);
    bulk_copy(st, wsrc + int64_t(kb) * kTileBytes, kTileBytes, full + s, kL2EvictFirst);
    bulk_copy(st + kTileBytes, hip + (xt0 + kb) * kTileBytes, kTileBytes, full + s);
    if (lo) bulk_copy(st + 2 * kTileBytes, lop + (xt0 + kb) * kTileBytes, kTileBytes, full + s);
  };
  bulk_ring_init<kStages>(full, released);
  bulk_ring_start<kStages>(kblocks, fetch);

  // ---- warpgroup h: outputs [64h, +64) × the 128 rows ----
  const int h = warp >> 2, w = warp & 3;
  float acc[64];
  double total[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f, total[i] = 0.0;
  int c = 0, kb = 0;  // block n of the chains' order is block kb of chain c
#pragma unroll 1
  for (int n = 0; n < kblocks; ++n) {
    const int s = n % kStages;
    mbar_wait(full + s, uint32_t((n / kStages) & 1));
    const bool lo = lo_on[s] != 0;
    const uint32_t wt = smem_addr(stages + s * kStageBytes), xh = wt + kTileBytes, xl = xh + kTileBytes;
    wg_fence();
    // k16 step k: atom k / 4, bytes 32·(k % 4); the branch outside the steps (one straight
    // chain of wgmmas either way).
    if (lo) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const uint32_t koff = (k >> 2) * (kTile * 128) + (k & 3) * 32;
        const uint64_t adesc = sw128_desc(wt + h * 64 * 128 + koff);
        wgmma_ss_n128<true, true>(acc, adesc, sw128_desc(xh + koff));
        wgmma_ss_n128<true, true>(acc, adesc, sw128_desc(xl + koff));
      }
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const uint32_t koff = (k >> 2) * (kTile * 128) + (k & 3) * 32;
        wgmma_ss_n128<true, true>(acc, sw128_desc(wt + h * 64 * 128 + koff), sw128_desc(xh + koff));
      }
    }
    wg_commit();
    wg_wait0();
    // The stage's reads are done: the last of the 8 warps to get here refills it.
    bulk_stage_release<kStages>(released, s, n, kblocks, kConsumers / 32, fetch);
    next_chain_block(acc, total, c, kb, kblocks);
  }
  finish_chains(acc, total, c);

  store_tile<16>(ta, a.rows, total, h, w, g, t);
}

}  // namespace

bool launch_bulk_dense(const Args& a0, cudaStream_t s) {
  Args a = a0;
  if (a.in % 128 != 0 || a.x_stride % 2 != 0) return false;
  dim3 grid;
  if (!tiled_grid(a, kTile, kTile, grid)) return false;
  const int64_t kblocks = a.in / 128, rtiles = grid.x, otiles = grid.y;
  const int64_t groups = a.nseg > 0 ? 1 : a.out / a.opg;
  const size_t wbytes = size_t(otiles) * kblocks * kTileBytes;
  const size_t xbytes = size_t(groups) * rtiles * kblocks * kTileBytes;
  const size_t fbytes = ((size_t(groups) * rtiles * kblocks * 4 + 255) / 256) * 256;
  uint8_t* base = bulk_scratch(ScratchSlot::kDenseBulk, wbytes + 2 * xbytes + fbytes, s);
  if (base == nullptr) return false;
  uint8_t *wp = base, *hip = base + wbytes, *lop = hip + xbytes;
  int32_t* flags = reinterpret_cast<int32_t*>(lop + xbytes);
  CUDA_CHECK(cudaMemsetAsync(flags, 0, fbytes, s));
  launch_pdl(dense_x_tiles_kernel, dim3(unsigned(conversion_grid(groups * rtiles * kTile * kblocks * 16))), 256, 0, s,
             static_cast<const float*>(a.x), a.rows, a.x_stride, a.in, groups, rtiles, hip, lop, flags);
  auto weight_tiles = [&](const void* w, int64_t out, int64_t tile0) {
    const int64_t tiles = ceil_tiles(out, kTile);
    launch_pdl(dense_w_tiles_kernel, dim3(unsigned(conversion_grid(tiles * kTile * kblocks * 16))), 256, 0, s,
               static_cast<const uint16_t*>(w), out, a.in, tiles, wp + size_t(tile0) * kblocks * kTileBytes);
  };
  if (a.nseg == 0) {
    // Grouped: each group's outputs are their own tiles (tiles_fit_groups: opg % 128 == 0 there).
    for (int64_t g = 0; g < groups; ++g)
      weight_tiles(static_cast<const uint16_t*>(a.w) + g * a.opg * a.in, a.opg, g * ceil_tiles(a.opg, kTile));
  } else {
    for (int j = 0; j < a.nseg; ++j) weight_tiles(a.seg[j].w, a.seg[j].out, a.seg[j].tile0);
  }
  static std::once_flag attr_set[kMaxDevices];  // cudaFuncSetAttribute is per device
  call_once_per_device(attr_set, [] {
    CUDA_CHECK(cudaFuncSetAttribute(dense_bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  });
  launch_pdl(dense_bulk_kernel, grid, kThreads, size_t(kSmem), s, a, static_cast<const uint8_t*>(wp),
             static_cast<const uint8_t*>(hip), static_cast<const uint8_t*>(lop), static_cast<const int32_t*>(flags),
             rtiles);
  return true;
}

}  // namespace dsv4::gpu::mma::detail
