// lin8 for many rows on sm_90a warpgroup MMAs, fed by bulk copies of pre-converted tiles
// (prefill): the same bits as every other lin8 kernel (linear_mma.h numerics).
//
// Why the same bits: per 128-K block every lin8 kernel forms a fresh chain of 8 f16 MMA k16 steps
// over the block's e4m3 values converted exactly to f16, step s taking physical k 32t + 4s +
// {0, 1} into MMA k {2t, 2t+1} and 32t + 4s + {2, 3} into {2t+8, 2t+9}; sm90_linear_wgmma.cu
// showed that 8 chained `wgmma m64nNk16 f16` over the same values in the same k positions give
// the same bits as the mma.sync chains. This kernel runs the same chains and the same sums.
//
// Why another form: the warp-specialized kernel of sm90_linear_wgmma.cu converts e4m3 → f16 in
// its producer warpgroup (128 threads convert 224 rows per block) and is bound by it (H200,
// 4096 × 4096 × 4096: 777 µs; producer alone 710, consumers alone 458). Here two small passes
// convert the whole call first — x rows and weight rows into f16 tiles already in the
// wgmma's 128-byte-swizzled layout, the activation scales beside them — so a stage is three
// contiguous runs (32 KB weights, 32 KB activations, 512 B scales) that one thread fetches with
// `cp.async.bulk` onto an mbarrier, and the CTA needs no producer warps: the 2 consumer
// warpgroups alone (8 warps, so a thread may hold 255 registers — a ninth warp would put three
// on one SM sub-partition and cap it at 168) hold 128-row tiles (part, acc and total: 3 × 64 fp32
// per thread); the last warp done with a stage issues its refill.
//
// CTA tile: 128 outputs × 128 rows; warpgroup h: outputs [64h, +64), 8 chained `wgmma
// m64n128k16 f16` per block, then acc = acc + part·(s_x·s_w); chain c = blocks c, c + 8, …;
// total = c == 0 ? acc : total + acc. 3 stages of 65 KB; the tile's weight scales staged in
// shared memory before the PDL wait (a global load per block left ~4 % exposed).
// H200, 4096 × 4096 × 4096 (conversions included): 452 µs (304 TFLOP/s of f16 work); with
// neither copies nor scaled sums 399 µs — the per-block chain itself is the floor (a second
// block's chain in flight per warpgroup, 96-row tiles: 553 µs, not kept).
// Scratch: the converted tiles live in a per-device buffer grown on demand (never while the
// stream is capturing a graph: a call it is too small for is then declined and the caller falls
// back to the other kernels).
#include <mutex>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_mma_common.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_wgmma_common.cuh"

namespace dsv4::gpu::mma::detail {
namespace {

using namespace wgmma;

constexpr int kTile = 128;                   // outputs and rows of a CTA tile
constexpr int kThreads = 256, kConsumers = 256;  // 8 warps: 2 per SM sub-partition, so 255 registers
constexpr int kTileBytes = kTile * 256;       // 128 rows × 128 f16: two 16 KB swizzle atoms
constexpr int kScaleBytes = kTile * 4;        // s_x of the tile's rows for one block
constexpr int kStageBytes = 2 * kTileBytes + 1024;  // weights, activations, scales (1024-aligned)
constexpr int kStages = 3;
constexpr int kMaxKBlocks = 512;  // in ≤ 65536 (the weight scales staged in shared memory)
constexpr int kSmem = 1024 + kStages * kStageBytes + 64 + kMaxKBlocks * 4;
static_assert(kSmem <= 232448, "over the sm_90 shared-memory limit");

// Conversion pass: rows [0, tiles·128) of a matrix of e4m3 codes (src [valid, in], row stride
// in) into f16 tiles — tile T, block kb at dst + (T·kblocks + kb)·kTileBytes, row p's 16-byte
// chunk C (logical pairs 4C .. 4C + 3: for i = 0..3 the pair at physical k 32i + 4·(C / 2) +
// 2·(C % 2)) at atom C / 8, chunk (C % 8) ^ (p & 7) — and, when xs is set, the rows' scales
// xs [valid, kblocks] into xsp [(T·kblocks + kb)·128 + p]. Rows ≥ valid become zeros.
__global__ void lin8_tiles_kernel(const uint8_t* __restrict__ src, const float* __restrict__ xs, int64_t valid,
                                  int64_t in, int64_t tiles, uint8_t* __restrict__ dst, float* __restrict__ xsp) {
  pdl_wait();
  pdl_trigger();
  // Item (row r, block kb, half h): the 8 chunks C = 8h .. 8h + 7 of the row — one whole 128-byte
  // line of atom h — from words 8q + 4h .. + 3 (q = 0..3) of the row's block. h is the fastest
  // index, then r: a warp reads 16 rows' blocks whole and writes 32 whole lines.
  const int64_t kblocks = in / 128, rows = tiles * kTile, total = 2 * rows * kblocks;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int h = int(i & 1);
    const int64_t r = (i >> 1) % rows, kb = (i >> 1) / rows;
    const int64_t T = r / kTile;
    const int p = int(r % kTile);
    uint4 v[4] = {};
    if (r < valid) {
      const uint4* s = reinterpret_cast<const uint4*>(src + r * in + kb * 128);
#pragma unroll
      for (int q = 0; q < 4; ++q) v[q] = __ldg(s + 2 * q + h);
    }
    auto word = [&](int q, int j) { return j == 0 ? v[q].x : j == 1 ? v[q].y : j == 2 ? v[q].z : v[q].w; };
    uint8_t* tile = dst + (T * kblocks + kb) * kTileBytes;
#pragma unroll
    for (int cc = 0; cc < 8; ++cc) {  // chunk C = 8h + cc: word 8q + C / 2 = word (cc / 2) of v[q]
      uint32_t o[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) o[q] = e4m3x2_to_f16x2(word(q, cc >> 1) >> (16 * (cc & 1)));
      *reinterpret_cast<uint4*>(tile + sw128_chunk_offset(kTile, p, 8 * h + cc)) = make_uint4(o[0], o[1], o[2], o[3]);
    }
    if (xs != nullptr && h == 0) xsp[(T * kblocks + kb) * kTile + p] = r < valid ? __ldg(xs + r * kblocks + kb) : 0.0f;
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    lin8_bulk_kernel(Args a, const uint8_t* __restrict__ wp, const uint8_t* __restrict__ xp,
                     const float* __restrict__ xsp) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* stages = smem_1024(smem_raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + kStages * kStageBytes);
  int* released = reinterpret_cast<int*>(full + kStages);  // warps done with a stage's block
  float* sw_all = reinterpret_cast<float*>(released + kStages);  // the tile's weight scales, by block
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const TileArgs ta = resolve_tile(a, kTile, kTile);
  const int kblocks = int(a.in / 128);
  const uint8_t* wsrc = wp + int64_t(blockIdx.y) * kblocks * kTileBytes;
  const uint8_t* xsrc = xp + int64_t(blockIdx.x) * kblocks * kTileBytes;
  const float* ssrc = xsp + int64_t(blockIdx.x) * kblocks * kTile;
  // Block n (chain order) into stage n % kStages: the expected bytes, then three bulk copies.
  auto fetch = [&](int n) {
    const int s = n % kStages;
    const int kb = chain_block32(n, kblocks);
    uint8_t* st = stages + s * kStageBytes;
    mbar_expect_tx(full + s, 2 * kTileBytes + kScaleBytes);
    bulk_copy(st, wsrc + kb * kTileBytes, kTileBytes, full + s, kL2EvictFirst);
    bulk_copy(st + kTileBytes, xsrc + kb * kTileBytes, kTileBytes, full + s);
    bulk_copy(st + 2 * kTileBytes, ssrc + kb * kTile, kScaleBytes, full + s);
  };
  bulk_ring_init<kStages>(full, released);
  {  // weights are not written by earlier kernels: read before the wait
    const int64_t srow = (ta.o0 / 128) * kblocks;
    for (int i = threadIdx.x; i < kblocks; i += kThreads) sw_all[i] = e8m0_to_float(__ldg(ta.ws + srow + i));
  }
  bulk_ring_start<kStages>(kblocks, fetch);

  // ---- consumers: warpgroup h, outputs [64h, +64) ----
  const int h = warp >> 2, w = warp & 3;

  float acc[64], total[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = total[i] = 0.0f;
  int c = 0, kb = 0;  // block n of the chains' order is block kb of chain c
#pragma unroll 1
  for (int n = 0; n < kblocks; ++n) {
    const int s = n % kStages;
    const float sw = sw_all[kb];
    mbar_wait(full + s, uint32_t((n / kStages) & 1));
    const uint32_t wt = smem_addr(stages + s * kStageBytes), xt = wt + kTileBytes;
    float part[64];
    wg_fence();
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // k16 step k: pairs 8k .. 8k + 7 = atom k / 4, bytes 32·(k % 4)
      const uint32_t koff = (k & 3) * 32;
      const uint64_t adesc = sw128_desc(wt + (k >> 2) * (kTile * 128) + h * 64 * 128 + koff);
      const uint64_t bdesc = sw128_desc(xt + (k >> 2) * (kTile * 128) + koff);
      if (k == 0) wgmma_ss_n128<false, false>(part, adesc, bdesc);
      else wgmma_ss_n128<false, true>(part, adesc, bdesc);
    }
    wg_commit();
    wg_wait0();
    const float* sc = reinterpret_cast<const float*>(stages + s * kStageBytes + 2 * kTileBytes);
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int c2 = 0; c2 < 2; ++c2) {
        const float m = sc[8 * j + 2 * t + c2] * sw;
#pragma unroll
        for (int r = 0; r < 2; ++r) acc[4 * j + 2 * r + c2] = acc[4 * j + 2 * r + c2] + part[4 * j + 2 * r + c2] * m;
      }
    // The stage's reads (wgmma, scales) are done: the last of the 8 warps to get here refills it.
    bulk_stage_release<kStages>(released, s, n, kblocks, kConsumers / 32, fetch);
    if (kb + kWarps >= kblocks) {  // the last block of chain c
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        total[i] = c == 0 ? acc[i] : total[i] + acc[i];
        acc[i] = 0.0f;
      }
      kb = ++c;
    } else {
      kb += kWarps;
    }
  }
  // Chains without blocks (K < 8 blocks) add zeros, as the register kernel's idle warps do.
  for (; c < kWarps; ++c)
#pragma unroll
    for (int i = 0; i < 64; ++i) total[i] = total[i] + acc[i];

  store_tile<16>(ta, a.rows, total, h, w, g, t);
}

// The per-device scratch buffers of the converted tiles (ScratchSlot). They only grow, and never
// while a graph is being captured; an outgrown buffer is kept (not freed), since a graph captured
// earlier may hold it.
struct Scratch {
  uint8_t* p = nullptr;
  size_t bytes = 0;
  std::vector<uint8_t*> retired;
};
Scratch g_scratch[kMaxDevices][int(ScratchSlot::kCount)];
std::mutex g_scratch_mu;

}  // namespace

uint8_t* bulk_scratch(ScratchSlot slot, size_t bytes, cudaStream_t s) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(g_scratch_mu);
  Scratch& sc = g_scratch[dev][int(slot)];
  if (sc.bytes >= bytes) return sc.p;
  if (cap != cudaStreamCaptureStatusNone) return nullptr;
  uint8_t* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (sc.p != nullptr) sc.retired.push_back(sc.p);
  sc.p = p;
  sc.bytes = bytes;
  return p;
}

namespace {

void launch_tiles(const uint8_t* src, const float* xs, int64_t valid, int64_t in, int64_t tiles, uint8_t* dst,
                  float* xsp, cudaStream_t s) {
  const int64_t total = 2 * tiles * kTile * (in / 128);
  launch_pdl(lin8_tiles_kernel, dim3(unsigned(conversion_grid(total))), 256, 0, s, src, xs, valid, in, tiles, dst, xsp);
}

}  // namespace

bool launch_bulk_lin8(const Args& a0, cudaStream_t s) {
  Args a = a0;
  if (a.x_row_div != 1 || (a.nseg == 0 && a.opg != a.out) || a.in % 128 != 0 || a.in / 128 > kMaxKBlocks)
    return false;
  dim3 grid;
  if (!tiled_grid(a, kTile, kTile, grid)) return false;
  const int64_t kblocks = a.in / 128, rtiles = grid.x, otiles = grid.y;
  const size_t wbytes = size_t(otiles) * kblocks * kTileBytes, xbytes = size_t(rtiles) * kblocks * kTileBytes;
  const size_t sbytes = size_t(rtiles) * kblocks * kScaleBytes;
  uint8_t* base = bulk_scratch(ScratchSlot::kLin8Bulk, wbytes + xbytes + sbytes, s);
  if (base == nullptr) return false;
  uint8_t *wp = base, *xp = base + wbytes;
  float* xsp = reinterpret_cast<float*>(base + wbytes + xbytes);
  launch_tiles(static_cast<const uint8_t*>(a.x), a.xs, a.rows, a.in, rtiles, xp, xsp, s);
  if (a.nseg == 0) {
    launch_tiles(static_cast<const uint8_t*>(a.w), nullptr, a.out, a.in, otiles, wp, nullptr, s);
  } else {
    for (int j = 0; j < a.nseg; ++j)
      launch_tiles(static_cast<const uint8_t*>(a.seg[j].w), nullptr, a.seg[j].out, a.in,
                   ceil_tiles(a.seg[j].out, kTile), wp + size_t(a.seg[j].tile0) * kblocks * kTileBytes, nullptr, s);
  }
  static std::once_flag attr_set[kMaxDevices];  // cudaFuncSetAttribute is per device
  call_once_per_device(attr_set, [] {
    CUDA_CHECK(cudaFuncSetAttribute(lin8_bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  });
  launch_pdl(lin8_bulk_kernel, grid, kThreads, size_t(kSmem), s, a, static_cast<const uint8_t*>(wp),
             static_cast<const uint8_t*>(xp), static_cast<const float*>(xsp));
  return true;
}

}  // namespace dsv4::gpu::mma::detail
