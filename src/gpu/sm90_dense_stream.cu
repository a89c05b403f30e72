// The bf16 dense linear for decode-size calls (1 … 64 rows) on sm_90a warpgroup MMAs, the
// weights streamed by the tensor-memory accelerator: the same bits as every dense kernel
// (linear_mma.h numerics).
//
// Why another form: the register-fed tiles run the LM head (129280 × 4096) at 64 rows at about a
// quarter of HBM (CUPTI, TP1 batch 64: 753 µs a step), held back by their mma.sync instruction
// stream, not by the loads. Here the loads are TMA boxes and the MMAs warpgroup MMAs with the
// weights as register operands (sm90_lin8_stream.cu's structure, without its cluster split).
//
// Why the same bits (sm90_dense_bulk.cu's chain): x is split into bf16 hi + lo; per chain c
// (blocks c, c + 8, … in increasing kb) one fp32 MMA chain into a zeroed accumulator — per k16
// step the hi MMA, then the lo MMA (skipped when the block's lo values are all zero: an MMA over
// exact zeros changes nothing) — then
// total = c == 0 ? double(acc) : total + double(acc); the output is float(total), then the
// optional bf16 rounding and post_scale (store_tile). Step k = 4η + s of lane (g, t) takes the
// pairs at physical k 32t + 16η + 4s + {0, 1} as MMA k {2t, 2t+1} and + {2, 3} as {2t+8, 2t+9}
// (the register kernels' fragment order): lane t owns physical k 32t .. 32t + 31 of its rows, and
// step k's A fragment is the lane's words 2k and 2k + 1 of weight rows 16w + g and 16w + g + 8.
// The lo MMAs of a block run when some lo of the block's x tile is nonzero (a flag per tile).
//
// CTA = 2 consumer warpgroups + 1 producer warp (288 threads); tile = 128 outputs × N rows (N =
// 8·NJ). A launch before this one splits x once per call into bf16 hi and lo tiles of N rows
// per (group, block) in the wgmma B layout (two 128-byte-swizzled atoms each) and a flag per
// tile: some lo ≠ 0. The producer's lane 0 fills a ring, per block in the chains' order, with the
// two boxes of 128 weight rows × 64 bf16 (cp.async.bulk.tensor, 128-byte swizzle; issued before
// the grid dependency for the first stages) and the block's hi tile, + lo when flagged (one bulk
// copy); the consumers release a stage to it on an mbarrier once its MMAs are waited for.

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_mma_common.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_tma_stream.cuh"
#include "gpu/sm90_wgmma_common.cuh"

namespace dsv4::gpu::mma::detail {
namespace {

using namespace wgmma;
using namespace stream;

constexpr int kOut = 128;                  // outputs of a CTA tile
constexpr int kConsumers = 256, kThreads = kConsumers + 32;
constexpr int kBox = kOut * 128;           // one weight box: 128 rows × 128 bytes (64 bf16 or 128 e4m3)
constexpr int kSmemLimit = 232448;
constexpr int kMaxScaleBlocks = 128;       // e4m3 weights: K blocks whose tile scales fit

template <Wt WT, int NJ>
struct Layout {
  static constexpr bool kFp8 = WT == Wt::kFp8AsBf16;
  static constexpr int kWBytes = kFp8 ? kBox : 2 * kBox;   // a block's weights
  static constexpr int kRows = 8 * NJ;
  static constexpr int kXTile = kRows * 256;                // one B tile (hi or lo): two atoms of kRows × 128 B
  static constexpr int kXBytes = 2 * kXTile;                // hi, then lo
  static constexpr int kStage = kWBytes + kXBytes;          // a multiple of 1024
  static constexpr int kStages = (kSmemLimit - 1024 - 1024) / kStage;
  static constexpr int kBars = kStages * kStage;            // full[kStages], empty[kStages]
  static constexpr int kLoOn = kBars + 2 * kStages * 8;     // the stage's block has lo values
  static constexpr int kScales = kLoOn + kStages * 4;       // e4m3: the tile-scale exponents [kblocks]
  static constexpr int kSmem = 1024 + kScales + (kFp8 ? kMaxScaleBlocks * 4 : 0);
  static_assert(kStage % 1024 == 0, "stages must keep the 1024-byte swizzle alignment");
  static_assert(kStages >= 3 && kSmem <= kSmemLimit, "shared memory for a 3-stage ring");
};

struct Maps {
  CUtensorMap w[kMaxDenseSegments];  // weights [out, in] (bf16 as bytes [out, 2·in]) of each segment
};

// x (fp32 [valid, x_stride], group g's slice at g·in) into the B tiles, one CTA per (block kb,
// group g): tile (g, kb) at dst + (g·kblocks + kb)·2·(N·256), hi then lo, row p's chunk C at
// sw128_chunk_offset(N, p, C), rows ≥ valid zeros; lo_flag[g·kblocks + kb] = some lo ≠ 0.
__global__ void __launch_bounds__(256) dense_x_stream_kernel(const float* __restrict__ x, int64_t valid,
                                                             int64_t x_stride, int64_t in, int N,
                                                             uint8_t* __restrict__ dst, int32_t* __restrict__ lo_flag) {
  pdl_wait();
  pdl_trigger();
  const int64_t kblocks = in / 128, kb = blockIdx.x, g = blockIdx.y, tile = g * kblocks + kb;
  bool any = false;
  for (int i = threadIdx.x; i < N * 16; i += blockDim.x) {
    const int C = i & 15, p = i >> 4;
    uint32_t h[4] = {0u, 0u, 0u, 0u}, l[4] = {0u, 0u, 0u, 0u};
    if (p < valid) any |= dense_x_chunk(x + p * x_stride + g * in + kb * 128, C, h, l);
    uint8_t* dst_p = dst + tile * (2 * N * 256) + sw128_chunk_offset(N, p, C);
    *reinterpret_cast<uint4*>(dst_p) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4*>(dst_p + N * 256) = make_uint4(l[0], l[1], l[2], l[3]);
  }
  any = __syncthreads_or(any);
  if (threadIdx.x == 0) lo_flag[tile] = any;
}

template <Wt WT, int NJ>
__global__ void __launch_bounds__(kThreads, 1)
    dense_stream_kernel(Args a, const __grid_constant__ Maps maps, const uint8_t* __restrict__ xp,
                        const int32_t* __restrict__ lo_flag) {
  using L = Layout<WT, NJ>;
  constexpr int kStages = L::kStages, N = L::kRows, kWBytes = L::kWBytes;
  constexpr bool kFp8 = L::kFp8;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* sm = smem_1024(smem_raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(sm + L::kBars);
  uint64_t* empty = full + kStages;
  int* lo_on = reinterpret_cast<int*>(sm + L::kLoOn);
  int* scale_e = reinterpret_cast<int*>(sm + L::kScales);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const TileArgs ta = resolve_tile(a, kOut, N);
  const int kblocks = int(a.in / 128);

  ring_init<kStages>(full, empty, 2, kConsumers / 32);  // full: the weights' and the x tiles' arrivals
  if constexpr (kFp8)  // tile scales are not written by earlier kernels: read before the wait
    for (int i = threadIdx.x; i < kblocks; i += kThreads) scale_e[i] = __ldg(ta.ws + (ta.o0 / 128) * kblocks + i);
  __syncthreads();  // the barriers initialized, the scales staged

  if (warp == kConsumers / 32) {  // ---- producer: one lane issues every copy ----
    if (lane == 0) {
      const CUtensorMap* wmap = segment_map(maps.w, ta.seg);
      const int64_t tile0 = int64_t(ta.grp) * kblocks;  // the group's first x tile
      auto weights = [&](int s, int kb) {
        uint8_t* st = sm + s * L::kStage;
        mbar_expect_tx(full + s, kWBytes);
        if constexpr (kFp8) {
          tma_load_2d(st, wmap, kb * 128, int(ta.o0), full + s, wgmma::kL2EvictFirst);
        } else {
          tma_load_2d(st, wmap, kb * 256, int(ta.o0), full + s, wgmma::kL2EvictFirst);
          tma_load_2d(st + kBox, wmap, kb * 256 + 128, int(ta.o0), full + s, wgmma::kL2EvictFirst);
        }
      };
      auto x_tiles = [&](int s, int kb) {
        const int lo = lo_flag[tile0 + kb];
        lo_on[s] = lo;  // visible to the consumers through the barrier's completion
        mbar_expect_tx(full + s, lo ? L::kXBytes : L::kXTile);
        bulk_copy(sm + s * L::kStage + kWBytes, xp + (tile0 + kb) * L::kXBytes, lo ? L::kXBytes : L::kXTile, full + s);
      };
      // The first ring's weights before the wait (weights are not written by earlier kernels),
      // its x tiles after it (the split launch before this one writes them), then one block per
      // released stage.
      const int first = kblocks < kStages ? kblocks : kStages;
      for (int n = 0; n < first; ++n) weights(n, chain_block32(n, kblocks));
      pdl_wait();
      pdl_trigger();
      for (int n = 0; n < first; ++n) x_tiles(n, chain_block32(n, kblocks));
      for (int n = first; n < kblocks; ++n) {
        const int s = n % kStages, kb = chain_block32(n, kblocks);
        mbar_wait(empty + s, uint32_t((n / kStages - 1) & 1));
        weights(s, kb);
        x_tiles(s, kb);
      }
    }
    __syncwarp();
    return;
  }
  // ---- consumers: warpgroup h owns outputs [64h, +64) of the tile ----
  const int h = warp >> 2, w = warp & 3;
  const int R0 = 64 * h + 16 * w + g, R1 = R0 + 8;
  float acc[4 * NJ];
  double total[4 * NJ];
#pragma unroll
  for (int i = 0; i < 4 * NJ; ++i) acc[i] = 0.0f, total[i] = 0.0;
  int c = 0, kbc = 0;  // block n of the chains' order is block kbc of chain c
  // e4m3: acc is in units of the tile scale 2^(e_cur − 127) of the chain's current block (−1: none
  // yet); at a block with another scale it is multiplied by 2^(e_cur − e) (ldexpf, exact while a
  // normal fp32 value), at the chain's end by 2^(e_cur − 127) — the register tiles' arithmetic.
  int e_cur = -1;
#pragma unroll 1
  for (int n = 0; n < kblocks; ++n) {
    const int s = n % kStages;
    const uint8_t* st = sm + s * L::kStage;
    if constexpr (kFp8) {
      const int e = scale_e[kbc];
      if (e != e_cur) {
        if (e_cur >= 0)
#pragma unroll
          for (int i = 0; i < 4 * NJ; ++i) acc[i] = ldexpf(acc[i], e_cur - e);
        e_cur = e;
      }
    }
    mbar_wait(full + s, uint32_t((n / kStages) & 1));
    uint32_t af[8][4];  // step k: MMA pairs t (k 2t, 2t+1) and t + 4 (2t+8, 2t+9) of rows R0, R1
    if constexpr (kFp8) {
      e4m3_box_fragments(st, R0, t, af, [](uint32_t v) { return e4m3x2_to_bf16x2(v); });
    } else {
      // The lane's physical k 32t .. 32t + 31 of rows R0, R1: box t / 2, chunks 4·(t % 2) + q,
      // swizzled by row; step k: words 2k (pair t) and 2k + 1 (pair t + 4).
      const uint8_t* box = st + (t >> 1) * kBox;
      uint4 wv[2][4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        wv[0][q] = *reinterpret_cast<const uint4*>(box + R0 * 128 + (((4 * (t & 1) + q) ^ (R0 & 7)) << 4));
        wv[1][q] = *reinterpret_cast<const uint4*>(box + R1 * 128 + (((4 * (t & 1) + q) ^ (R1 & 7)) << 4));
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        af[k][0] = word(wv[0], 2 * k);
        af[k][1] = word(wv[1], 2 * k);
        af[k][2] = word(wv[0], 2 * k + 1);
        af[k][3] = word(wv[1], 2 * k + 1);
      }
    }
    const uint32_t xh = smem_addr(st + kWBytes), xl = xh + L::kXTile;
    wg_fence();
    // k16 step k: atom k / 4, bytes 32·(k % 4); the branch outside the steps.
    if (lo_on[s] != 0) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const uint32_t koff = (k >> 2) * (N * 128) + (k & 3) * 32;
        wgmma_rs<NJ, true>(acc, af[k], sw128_desc(xh + koff), true);
        wgmma_rs<NJ, true>(acc, af[k], sw128_desc(xl + koff), true);
      }
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k)
        wgmma_rs<NJ, true>(acc, af[k], sw128_desc(xh + (k >> 2) * (N * 128) + (k & 3) * 32), true);
    }
    wg_commit();
    wg_wait0();
    // Every read of stage s is done (weights in registers, the B tiles by the waited MMAs).
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);
    if (kFp8 && kbc + kWarps >= kblocks) {  // chain c's last block: back from its scale units
#pragma unroll
      for (int i = 0; i < 4 * NJ; ++i) acc[i] = ldexpf(acc[i], e_cur - 127);
      e_cur = -1;
    }
    next_chain_block(acc, total, c, kbc, kblocks);
  }
  finish_chains(acc, total, c);
  store_tile<NJ>(ta, a.rows, total, h, w, g, t);
}

// The call on one row tile of 8·NJ rows (see launch_stream_dense).
template <Wt WT, int NJ>
bool launch(Args a, cudaStream_t s) {
  using L = Layout<WT, NJ>;
  const int64_t cols = L::kFp8 ? a.in : 2 * a.in;  // the weight rows' bytes
  dim3 grid;
  if (!tiled_grid(a, kOut, L::kRows, grid) || grid.x != 1) return false;  // x: row tiles, y: output tiles
  const int64_t kblocks = a.in / 128, groups = a.nseg > 0 ? 1 : a.out / a.opg;
  const size_t xbytes = size_t(groups * kblocks) * L::kXBytes;
  uint8_t* xp = bulk_scratch(ScratchSlot::kDenseStream, xbytes + size_t(groups * kblocks) * 4, s);
  if (xp == nullptr) return false;
  int32_t* flags = reinterpret_cast<int32_t*>(xp + xbytes);
  Maps maps{};
  if (!encode_weight_maps(a, cols, maps.w)) return false;
  launch_pdl(dense_x_stream_kernel, dim3(unsigned(kblocks), unsigned(groups)), 256, 0, s,
             static_cast<const float*>(a.x), a.rows, a.x_stride, a.in, L::kRows, xp, flags);
  launch_streamed<dense_stream_kernel<WT, NJ>>(grid, kThreads, L::kSmem, 1, s, a, maps, static_cast<const uint8_t*>(xp),
                                               static_cast<const int32_t*>(flags));
  return true;
}

}  // namespace

template <Wt WT>
bool launch_stream_dense(const Args& a, cudaStream_t s) {
  static_assert(WT == Wt::kBf16 || WT == Wt::kFp8AsBf16, "the dense weight types");
  if (a.rows > 64 || a.in % 128 != 0 || a.x_stride % 2 != 0 || (reinterpret_cast<uintptr_t>(a.x) & 7) != 0 ||
      (a.nseg == 0 && !aligned16(a.w)) ||
      (WT == Wt::kFp8AsBf16 && (a.nseg > 0 || a.in / 128 > kMaxScaleBlocks)))
    return false;
  if (a.rows <= 8) return launch<WT, 1>(a, s);
  if (a.rows <= 16) return launch<WT, 2>(a, s);
  if (a.rows <= 32) return launch<WT, 4>(a, s);
  return launch<WT, 8>(a, s);
}
template bool launch_stream_dense<Wt::kBf16>(const Args&, cudaStream_t);
template bool launch_stream_dense<Wt::kFp8AsBf16>(const Args&, cudaStream_t);

}  // namespace dsv4::gpu::mma::detail
