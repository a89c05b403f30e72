// What the TMA-streamed decode linears share (sm90_lin8_stream.cu: lin8; sm90_dense_stream.cu:
// the bf16 dense path): tensor maps of row-major byte matrices read in 128-byte × box-row boxes
// (a call's weight maps, a segment's map), the launch, the ring's barriers, the 2-D tensor copy
// onto an mbarrier, the consumers' named barrier, the A fragments of an e4m3 box, and the
// register-A warpgroup MMA m64nNk16 (N = 8·NJ) in f16 or bf16. sm_90a only.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <mutex>

#include "gpu/cuda_check.h"
#include "gpu/linear_mma_common.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_wgmma_common.cuh"

namespace dsv4::gpu::mma::detail::stream {

// Host: the driver's cuTensorMapEncodeTiled through the runtime (no libcuda link), or null.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    (void)cudaGetLastError();
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// Host: a 2-D map of a row-major byte matrix [rows, cols] read in boxes of 128 bytes × box_rows
// rows (rows beyond the matrix read as zeros); 128-byte swizzled when `swizzle` (weight boxes).
inline bool encode_map(CUtensorMap* map, const void* base, int64_t rows, int64_t cols, int box_rows, bool swizzle) {
  const auto enc = tensor_map_encoder();
  if (enc == nullptr) return false;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols)};
  const cuuint32_t box[2] = {128, cuuint32_t(box_rows)}, estr[2] = {1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Host: the weight maps of a call in boxes of 128 rows — a.w, or each segment's weight (map j for
// segment j) — for rows of `cols` bytes (e4m3: in; bf16: 2·in). False when one cannot be made.
inline bool encode_weight_maps(const Args& a, int64_t cols, CUtensorMap (&w)[kMaxDenseSegments]) {
  if (a.nseg == 0) return encode_map(&w[0], a.w, a.out, cols, 128, true);
  for (int j = 0; j < a.nseg; ++j)
    if (!aligned16(a.seg[j].w) || !encode_map(&w[j], a.seg[j].w, a.seg[j].out, cols, 128, true)) return false;
  return true;
}
// The map of segment seg (resolve_tile's TileArgs::seg), by static indices only (a dynamic index
// would copy the __grid_constant__ maps to local memory).
__device__ __forceinline__ const CUtensorMap* segment_map(const CUtensorMap (&w)[kMaxDenseSegments], int seg) {
  const CUtensorMap* m = &w[0];
#pragma unroll
  for (int i = 1; i < kMaxDenseSegments; ++i)
    if (i == seg) m = &w[i];
  return m;
}
// Host: launches Kernel with `smem` bytes of dynamic shared memory (its limit set once per
// device), in clusters of `cluster` CTAs when > 1, under programmatic dependent launch when on.
template <auto* Kernel, class... A>
void launch_streamed(dim3 grid, int threads, int smem, int cluster, cudaStream_t s, A... args) {
  static std::once_flag attr_set[kMaxDevices];
  call_once_per_device(attr_set, [&] {
    CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  });
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = size_t(smem);
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = cluster_pdl_attrs(attr, cluster, pdl_enabled());
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, Kernel, args...));
}

// Thread 0 initializes a producer / consumer ring: full[s] completes on full_arrivals expect-tx
// arrivals plus their bytes, empty[s] on one arrival per consumer warp. The caller syncs after.
template <int kStages>
__device__ __forceinline__ void ring_init(uint64_t* full, uint64_t* empty, int full_arrivals, int consumer_warps) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      wgmma::mbar_init(full + s, full_arrivals);
      wgmma::mbar_init(empty + s, consumer_warps);
    }
    wgmma::mbar_init_fence();
  }
}

// The box at byte column c0, row c1 of map into dst, completing on bar's transaction count.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          wgmma::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(wgmma::smem_addr(bar))
      : "memory");
}
// The same with an L2 cache policy (wgmma::kL2EvictFirst for the weight boxes).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar,
                                            uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(wgmma::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(wgmma::smem_addr(bar)), "l"(policy)
      : "memory");
}

// Barrier 1 over the first kThreads threads of the CTA (the consumer warpgroups).
template <int kThreads>
__device__ __forceinline__ void named_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
}

// The A fragments of a block from a 128-row × 128-byte box of e4m3 codes (128-byte swizzled):
// lane (g, t) reads bytes 32t .. 32t + 31 (chunks 2t, 2t + 1) of rows R0 and R0 + 8; step k's
// fragment is word k of both rows, its low code pair (MMA k 2t, 2t + 1) and high pair (2t + 8,
// 2t + 9) each through conv (e4m3x2 → f16x2 or bf16x2, exact).
template <class Conv>
__device__ __forceinline__ void e4m3_box_fragments(const uint8_t* box, int R0, int t, uint32_t (&af)[8][4], Conv conv) {
  const int R1 = R0 + 8;
  uint4 wv[2][2];
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    wv[0][q] = *reinterpret_cast<const uint4*>(box + R0 * 128 + (((2 * t + q) ^ (R0 & 7)) << 4));
    wv[1][q] = *reinterpret_cast<const uint4*>(box + R1 * 128 + (((2 * t + q) ^ (R1 & 7)) << 4));
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const uint32_t w0 = word(wv[0], k), w1 = word(wv[1], k);
    af[k][0] = conv(w0);
    af[k][1] = conv(w1);
    af[k][2] = conv(w0 >> 16);
    af[k][3] = conv(w1 >> 16);
  }
}

// d (+)= A(64 × 16, registers: a[0..3] the mma.sync m16n8k16 A fragment of the warp's 16 rows) ·
// B(N × 16 at bdesc)ᵀ, f16 (kBf16: bf16) operands, fp32 accumulate; fresh when !acc.
#define DSV4_WGMMA_RS(N, TYPE, DREGS, PRED, AREGS, ...)                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" PRED ", 0;\n"                                               \
               "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." TYPE "." TYPE " " DREGS ", " AREGS ", p, 1, 1, 0;\n}\n" \
               : __VA_ARGS__)
template <int NJ, bool kBf16>
__device__ __forceinline__ void wgmma_rs(float (&d)[4 * NJ], const uint32_t (&a)[4], uint64_t bdesc, bool acc) {
#define DSV4_RS_IN "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "r"(int(acc))
#define DSV4_RS_CASE(TYPE)                                                                                        \
  if constexpr (NJ == 1) {                                                                                        \
    DSV4_WGMMA_RS("8", TYPE, "{%0,%1,%2,%3}", "9", "{%4,%5,%6,%7}, %8", "+f"(d[0]), "+f"(d[1]), "+f"(d[2]),       \
                  "+f"(d[3])                                                                                      \
                  : DSV4_RS_IN);                                                                                  \
  } else if constexpr (NJ == 2) {                                                                                 \
    DSV4_WGMMA_RS("16", TYPE, "{%0,%1,%2,%3,%4,%5,%6,%7}", "13", "{%8,%9,%10,%11}, %12", "+f"(d[0]), "+f"(d[1]), \
                  "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])                          \
                  : DSV4_RS_IN);                                                                                  \
  } else if constexpr (NJ == 4) {                                                                                 \
    DSV4_WGMMA_RS("32", TYPE, "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}", "21",                    \
                  "{%16,%17,%18,%19}, %20", "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]),           \
                  "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),          \
                  "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])                                              \
                  : DSV4_RS_IN);                                                                                  \
  } else {                                                                                                        \
    static_assert(NJ == 8, "8, 16, 32 or 64 rows");                                                               \
    DSV4_WGMMA_RS("64", TYPE,                                                                                     \
                  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,"   \
                  "%25,%26,%27,%28,%29,%30,%31}",                                                                 \
                  "37", "{%32,%33,%34,%35}, %36", "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]),     \
                  "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),          \
                  "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),      \
                  "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),      \
                  "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                    \
                  : DSV4_RS_IN);                                                                                  \
  }
  if constexpr (kBf16) {
    DSV4_RS_CASE("bf16")
  } else {
    DSV4_RS_CASE("f16")
  }
#undef DSV4_RS_CASE
#undef DSV4_RS_IN
}
#undef DSV4_WGMMA_RS

}  // namespace dsv4::gpu::mma::detail::stream
