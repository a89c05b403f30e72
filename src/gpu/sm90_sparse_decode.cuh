// Warp-level building blocks shared by the sm_90a sparse decode attention and the lightning
// indexer: ldmatrix, mma.sync m16n8k16 (bf16 → fp32), cp.async, FP8 tile dequantization.
//
// Fragment conventions (PTX ISA, mma.m16n8k16 .row.col): A is 16×16 row-major (4 × b32 regs),
// B is 16×8 "col" (2 × b32 regs: k = 2·(lane%4)+{0,1} (+8), n = lane/4), C/D is 16×8 fp32
// (c0,c1: row lane/4, cols 2·(lane%4)+{0,1}; c2,c3: row lane/4+8). ldmatrix_x4 takes one
// 16-byte row address per lane (lanes 8i..8i+7 address matrix i).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::gpu::sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// d += a · b (bf16 inputs, fp32 accumulators).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 4 e4m3 codes (one b32, low byte first) × 2^(e8m0 − 127) → 4 bf16 (two b32). Exact: e4m3 ·
// 2^k has 4 significant bits and k ∈ [−22, 0] for reference-clamped scales.
__device__ __forceinline__ uint2 dequant_e4m3x4(uint32_t codes, float scale) {
  const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3);
  const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(codes >> 16), __NV_E4M3);
  const float2 f0 = __half22float2(*reinterpret_cast<const __half2*>(&lo));
  const float2 f1 = __half22float2(*reinterpret_cast<const __half2*>(&hi));
  return make_uint2(pack_bf16x2(f0.x * scale, f0.y * scale),
                    pack_bf16x2(f1.x * scale, f1.y * scale));
}

__device__ __forceinline__ float e8m0_to_float(uint8_t e) {
  return __uint_as_float(uint32_t(e) << 23);  // 2^(e−127); e = 0 never written
}

}  // namespace dsv4::gpu::sm90
