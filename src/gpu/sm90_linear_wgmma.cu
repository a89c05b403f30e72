// lin8 for many rows on sm_90a warpgroup MMAs (prefill), warp-specialized: the same bits as the
// shared-memory-staged kernel (linear_mma_staged.cu) and so as the register-fed tiles
// (linear_mma.h numerics).
//
// Why it can: per 128-K block every lin8 kernel forms a fresh 8-step f16 MMA chain (e4m3 → f16
// exact; k16 step s takes physical k 32t + 4s + {0, 1} into MMA k {2t, 2t+1} and 32t + 4s + {2, 3}
// into {2t+8, 2t+9}). A chain of 8 `wgmma m64nNk16 f16` over the same values in the same k
// positions gives the same bits (H200 probe, docs/decode-linears.md round 12).
//
// CTA = 3 warpgroups, tile 128 outputs × 96 rows:
//   warpgroups 0, 1 (consumers): outputs [64h, +64) × the 96 rows, 8 chained
//     `wgmma m64n96k16 f16` per block from a shared-memory f16 stage, then the staged kernel's
//     sums: acc = acc + part·(s_x·s_w) per block, chain c = blocks c, c + 8, …, per chain
//     total = c == 0 ? acc : total + acc;
//   warpgroup 2 (producer): thread p owns weight row p and activation row p (p < 96) of the tile;
//     it copies both rows' 128 raw bytes of a block into a 3-slot ring by cp.async two blocks ahead (16-byte
//     granules XOR-swizzled by row), then converts its rows into the f16 stage in the logical k
//     order — whole 16-byte chunks of the 128-byte-swizzled K-major layout, one st.shared.v4 each,
//     conflict-free — and the block's activation scales beside it; full / empty mbarriers hand
//     the two f16 stages between producer and consumers.
// Registers: consumers 3 × 48 accumulators (setmaxnreg 200), producer 96.
// H200 (docs/prefill.md): a 20-layer 8K prefill's lin8 196.6 → 154.8 ms against the staged kernel;
// linear_mma_dispatch.cu sends calls of at least 2048 rows here.
#include <mutex>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_mma_common.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_wgmma_common.cuh"

namespace dsv4::gpu::mma::detail {
namespace {

using namespace wgmma;

// 96 rows, not 128: a consumer thread holds part, acc and the chains' total (3 × 48 fp32), and
// the whole kernel compiles under the 168-register launch bound (setmaxnreg does not raise it).
constexpr int kTileOut = 128, kTileRows = 96, kThreads = 384, kConsumers = 256, kProducers = 128;
constexpr int kWTile = kTileOut * 256;       // 128 rows × 128 f16 values: two 16 KB swizzle atoms
constexpr int kXTile = kTileRows * 256;      // 96 rows: two 12 KB atoms
constexpr int kF16Stage = kWTile + kXTile;   // 56 KB (a multiple of 1024)
constexpr int kF16Stages = 2, kRawSlots = 3;
constexpr int kRawSlot = (kTileOut + kTileRows) * 128;  // raw e4m3 weight rows, then activation rows
constexpr int kScaleFloats = kTileRows + 4; // per f16 stage: s_x of the tile rows, then s_w
constexpr int kSmem = 1024 + kF16Stages * kF16Stage + kRawSlots * kRawSlot + kF16Stages * kScaleFloats * 4 + 64;
static_assert(kSmem <= 232448, "over the sm_90 shared-memory limit");

// d (+)= A(64 × 16 f16 at adesc) · B(16 × 96 f16 at bdesc)ᵀ; accumulate = false: fresh.
// d[4j + 2r + c]: A row 16·(warp % 4) + g + 8r, B row 8j + 2t + c.
__device__ __forceinline__ void wgmma_f16_n96(float (&d)[48], uint64_t adesc, uint64_t bdesc, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "l"(adesc), "l"(bdesc), "r"(int(accumulate)));
}

// Producer thread p: block kb's 128 bytes of weight row p and activation row p into a raw slot
// (granule j of row p at (j ^ (p & 7))·16), one commit group (empty when kb < 0).
__device__ __forceinline__ void issue_raw(const Args& a, const TileArgs& ta, int p, int64_t kb, uint8_t* slot) {
  if (kb >= 0) {
    const int64_t o = min(ta.o0 + p, ta.o_end - 1);
    const int64_t r = min(ta.n0 + min(p, kTileRows - 1), a.rows - 1) / a.x_row_div;
    const uint8_t* wsrc = ta.w + o * a.in + kb * 128;
    const uint8_t* xsrc = static_cast<const uint8_t*>(a.x) + r * a.in + kb * 128;
#pragma unroll
    for (int j = 0; j < 8; ++j) cp_async16(slot + p * 128 + ((j ^ (p & 7)) << 4), wsrc + 16 * j);
    if (p < kTileRows)
#pragma unroll
      for (int j = 0; j < 8; ++j) cp_async16(slot + kTileOut * 128 + p * 128 + ((j ^ (p & 7)) << 4), xsrc + 16 * j);
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

// Row p of a raw slot region (128 codes, physical k order) into row p of an f16 tile in the
// logical k order: 16-byte chunk C (logical pairs 4C .. 4C + 3) holds, for i = 0..3, the pair at
// physical k 32i + 4·(C / 2) + 2·(C % 2) — word 8i + C / 2 of the row, half C % 2 — and goes to
// atom C / 8, chunk (C % 8) ^ (p & 7) of the 128-byte swizzle.
template <int R>  // rows of the f16 tile (an atom holds its R rows 128 B apart)
__device__ __forceinline__ void convert_row(const uint8_t* raw, uint8_t* tile, int p) {
  uint32_t wd[32];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint4 v = *reinterpret_cast<const uint4*>(raw + p * 128 + ((j ^ (p & 7)) << 4));
    wd[4 * j] = v.x, wd[4 * j + 1] = v.y, wd[4 * j + 2] = v.z, wd[4 * j + 3] = v.w;
  }
#pragma unroll
  for (int C = 0; C < 16; ++C) {
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) o[i] = e4m3x2_to_f16x2(wd[8 * i + (C >> 1)] >> (16 * (C & 1)));
    uint8_t* dst = tile + sw128_chunk_offset(R, p, C);
    *reinterpret_cast<uint4*>(dst) = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

__global__ void __launch_bounds__(kThreads, 1) wgmma_lin8_kernel(Args a) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t* f16 = smem;                                        // kF16Stages × kF16Stage
  uint8_t* raw = f16 + kF16Stages * kF16Stage;                // kRawSlots × kRawSlot
  float* scales = reinterpret_cast<float*>(raw + kRawSlots * kRawSlot);  // kF16Stages × kScaleFloats
  uint64_t* full = reinterpret_cast<uint64_t*>(scales + kF16Stages * kScaleFloats);
  uint64_t* empty = full + kF16Stages;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const TileArgs ta = resolve_tile(a, kTileOut, kTileRows);
  const int64_t kblocks = a.in / 128;
  const int64_t srow = (ta.o0 / 128) * kblocks;  // the tile's weight-scale row (128-aligned tile)
  if (threadIdx.x == 0) {
    for (int s = 0; s < kF16Stages; ++s) {
      mbar_init(full + s, kProducers);  // the producer's 128 threads
      mbar_init(empty + s, kConsumers);  // the consumers' 256 threads
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  pdl_wait();
  pdl_trigger();

  if (warp >= 8) {  // ---- producer ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 96;\n" ::: "memory");
    const int p = threadIdx.x - kConsumers;
    const int64_t r = min(ta.n0 + min(p, kTileRows - 1), a.rows - 1) / a.x_row_div;
    const float* sxrow = a.xs + r * kblocks;
#pragma unroll 1
    for (int i = 0; i < kRawSlots - 1; ++i) issue_raw(a, ta, p, chain_order_block(i, kblocks), raw + i * kRawSlot);
#pragma unroll 1
    for (int64_t n = 0; n < kblocks; ++n) {
      issue_raw(a, ta, p, chain_order_block(n + kRawSlots - 1, kblocks), raw + ((n + kRawSlots - 1) % kRawSlots) * kRawSlot);
      const int64_t kb = chain_order_block(n, kblocks);
      const float sx = __ldg(sxrow + kb);
      const float sw = p == 0 ? e8m0_to_float(__ldg(ta.ws + srow + kb)) : 0.0f;
      asm volatile("cp.async.wait_group %0;\n" ::"n"(kRawSlots - 1));  // block n's own copies landed
      const int s = int(n % kF16Stages);
      if (n >= kF16Stages) mbar_wait(empty + s, uint32_t((n / kF16Stages - 1) & 1));
      const uint8_t* rs = raw + (n % kRawSlots) * kRawSlot;
      uint8_t* st = f16 + s * kF16Stage;
      convert_row<kTileOut>(rs, st, p);
      if (p < kTileRows) {
        convert_row<kTileRows>(rs + kTileOut * 128, st + kWTile, p);
        scales[s * kScaleFloats + p] = sx;
      }
      if (p == 0) scales[s * kScaleFloats + kTileRows] = sw;
      fence_proxy_async();  // the stage's generic-proxy stores, before wgmma reads them
      mbar_arrive(full + s);
    }
    return;
  }

  // ---- consumers: warpgroup h, outputs [64h, +64) ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 200;\n" ::: "memory");
  const int h = warp >> 2, w = warp & 3;
  float acc[48], total[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) acc[i] = total[i] = 0.0f;
  int c = 0;
#pragma unroll 1
  for (int64_t n = 0; n < kblocks; ++n) {
    const int s = int(n % kF16Stages);
    mbar_wait(full + s, uint32_t((n / kF16Stages) & 1));
    const uint32_t wt = smem_addr(f16 + s * kF16Stage), xt = wt + kWTile;
    float part[48];
    wg_fence();
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // k16 step k: pairs 8k .. 8k + 7 = atom k / 4, bytes 32·(k % 4)
      const uint32_t koff = (k & 3) * 32;
      const uint64_t adesc = sw128_desc(wt + (k >> 2) * (kTileOut * 128) + h * 64 * 128 + koff);
      const uint64_t bdesc = sw128_desc(xt + (k >> 2) * (kTileRows * 128) + koff);
      wgmma_f16_n96(part, adesc, bdesc, k > 0);
    }
    wg_commit();
    wg_wait0();
    const float* sc = scales + s * kScaleFloats;
    const float sw = sc[kTileRows];
#pragma unroll
    for (int j = 0; j < 12; ++j)
#pragma unroll
      for (int c2 = 0; c2 < 2; ++c2) {
        const float m = sc[8 * j + 2 * t + c2] * sw;
#pragma unroll
        for (int r = 0; r < 2; ++r) acc[4 * j + 2 * r + c2] = acc[4 * j + 2 * r + c2] + part[4 * j + 2 * r + c2] * m;
      }
    mbar_arrive(empty + s);  // the stage's reads (wgmma, scales) are done
    const int64_t kb = chain_order_block(n, kblocks);
    if (kb + kWarps >= kblocks) {  // the last block of chain c
#pragma unroll
      for (int i = 0; i < 48; ++i) {
        total[i] = c == 0 ? acc[i] : total[i] + acc[i];
        acc[i] = 0.0f;
      }
      ++c;
    }
  }
  // Chains without blocks (K < 8 blocks) add zeros, as the register kernel's idle warps do.
  for (; c < kWarps; ++c)
#pragma unroll
    for (int i = 0; i < 48; ++i) total[i] = total[i] + acc[i];

  store_tile<12>(ta, a.rows, total, h, w, g, t);
}

}  // namespace

bool launch_wgmma_lin8(const Args& a0, cudaStream_t s) {
  Args a = a0;
  dim3 grid;
  if (!tiled_grid(a, kTileOut, kTileRows, grid)) return false;
  static std::once_flag attr_set[kMaxDevices];  // cudaFuncSetAttribute is per device
  call_once_per_device(attr_set, [] {
    CUDA_CHECK(cudaFuncSetAttribute(wgmma_lin8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  });
  launch_pdl(wgmma_lin8_kernel, grid, kThreads, size_t(kSmem), s, a);
  return true;
}

}  // namespace dsv4::gpu::mma::detail
