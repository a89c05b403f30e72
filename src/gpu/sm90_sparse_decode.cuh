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

// dequant_e4m3x4's bits without the fp32 round trip (the kernels' kIntDequant; docs/
// attention-decode-rounds.md round 10): e4m3 → f16 (exact: an e4m3 subnormal is an f16 normal,
// and an f16 from e4m3 has its low 7 mantissa bits zero), then f16 → bf16 by moving the exponent
// field — bf16 bits = sign | (f16 magnitude >> 3) is the value × 2^−112, exact and normal; zero
// stays zero; each half masked on its own, so a NaN code (whose f16 has low bits set) spoils only
// itself — then bf16 multiplies by powers of two whose product is scale · 2^112: the
// rounding of the exact product, as cvt.rn.bf16x2.f32 rounds dequant_e4m3x4's exact fp32 one.
// Two multiplies only for scales above 2^15 (E8M0 byte > 142; reference-clamped scales are ≤ 1),
// whose first factor 2^127 is exact. Equal to dequant_e4m3x4 for every code but the NaNs (0x7f,
// 0xff) and every E8M0 byte but 0 and 255 (never written): sparse_decode_dequant_test.cu checks
// all of them.
struct E4m3Scale {
  uint32_t f1, f2;  // bf16x2 (both halves) 2^k1, 2^k2: k1 + k2 = e − 15
  bool two;         // k2 ≠ 0
};
__device__ __forceinline__ uint32_t bf16x2_pow2(int k) {  // −126 ≤ k ≤ 127
  const uint32_t h = uint32_t(k + 127) << 7;
  return h | (h << 16);
}
__device__ __forceinline__ E4m3Scale e4m3_scale(uint32_t e8m0) {
  const int u = int(e8m0) - 15, k1 = min(u, 127);
  return {bf16x2_pow2(k1), bf16x2_pow2(u - k1), u > 127};
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t f16x2_to_bf16x2_scaled(__half2_raw h2, const E4m3Scale& s) {
  const uint32_t h = uint32_t(h2.x) | (uint32_t(h2.y) << 16);  // masks per half: a NaN half's low bits stay its own
  uint32_t r = bf16x2_mul(((h >> 3) & 0x0fff0fffu) | (h & 0x80008000u), s.f1);
  if (s.two) r = bf16x2_mul(r, s.f2);
  return r;
}
__device__ __forceinline__ uint2 dequant_e4m3x4_int(uint32_t codes, const E4m3Scale& s) {
  const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3);
  const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes >> 16), __NV_E4M3);
  return make_uint2(f16x2_to_bf16x2_scaled(lo, s), f16x2_to_bf16x2_scaled(hi, s));
}

__device__ __forceinline__ float e8m0_to_float(uint8_t e) {
  return __uint_as_float(uint32_t(e) << 23);  // 2^(e−127); e = 0 never written
}

// 16 e4m3 codes (low byte first) under E8M0 byte e8m0 → 16 bf16 (lo: codes 0..7, hi: 8..15), by
// dequant_e4m3x4_int (kIntDequant) or dequant_e4m3x4. Zero codes under a zero byte (the ws
// kernel's g_zero_entry) give +0 either way.
template <bool kIntDequant>
__device__ __forceinline__ void dequant_e4m3x16(const uint4& w, uint8_t e8m0, uint4& lo, uint4& hi) {
  uint2 a, b, e, f;
  if constexpr (kIntDequant) {
    const E4m3Scale sc = e4m3_scale(e8m0);
    a = dequant_e4m3x4_int(w.x, sc), b = dequant_e4m3x4_int(w.y, sc);
    e = dequant_e4m3x4_int(w.z, sc), f = dequant_e4m3x4_int(w.w, sc);
  } else {
    const float scale = e8m0_to_float(e8m0);
    a = dequant_e4m3x4(w.x, scale), b = dequant_e4m3x4(w.y, scale);
    e = dequant_e4m3x4(w.z, scale), f = dequant_e4m3x4(w.w, scale);
  }
  lo = make_uint4(a.x, a.y, b.x, b.y);
  hi = make_uint4(e.x, e.y, f.x, f.y);
}

}  // namespace dsv4::gpu::sm90
