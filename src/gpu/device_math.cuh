// Device-side bit formats and scalar math matching the host reference (numerics/formats.h,
// numerics/quant.h). Every function reproduces the host result bit for bit:
//  * bf16 rounding: round-to-nearest-even on the fp32 bits, NaN kept quiet;
//  * e4m3 / e2m1 encoders: RNE with saturation, same tie rules as the host encoders;
//  * exp/log1p go through double and round once (host libm expf/log1pf are within 0.5 ulp),
//    so a GPU/CPU difference stays at the last bit in rare cases only.
// The library is compiled with --fmad=false so that a*b+c is never contracted (the host
// build does not contract either); explicit fmaf() is used where the reference calls fma.
#pragma once

#include <cstdint>

namespace dsv4::gpu {

__device__ __forceinline__ float round_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(((u >> 16) | 0x40u) << 16);
  u += 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float((u >> 16) << 16);
}
__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(uint32_t{b} << 16); }
// The bf16 values packed in a word (low half = lower index) / in two words, as floats (exact).
__device__ __forceinline__ float2 bf16x2_to_float2(uint32_t u) {
  return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
__device__ __forceinline__ float4 bf16x4_to_float4(uint2 u) {
  const float2 a = bf16x2_to_float2(u.x), b = bf16x2_to_float2(u.y);
  return make_float4(a.x, a.y, b.x, b.y);
}
// The bits of a bf16 value held in a float (truncation: exact when is_bf16_value).
__device__ __forceinline__ uint16_t bf16_bits(float bf16_value) { return uint16_t(__float_as_uint(bf16_value) >> 16); }
__device__ __forceinline__ bool is_bf16_value(float v) { return (__float_as_uint(v) & 0xffffu) == 0; }

// Whether p is 16-byte aligned (float4 / uint4 access); host and device.
__host__ __device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
__host__ __device__ __forceinline__ bool aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7) == 0; }

__device__ __forceinline__ float e4m3_to_float(uint8_t b) {
  const uint32_t sign = uint32_t(b >> 7) << 31;
  const int exp = (b >> 3) & 0xf, man = b & 7;
  if (exp == 0xf && man == 7) return __uint_as_float(0x7fc00000u);
  if (exp == 0) return __uint_as_float(sign | __float_as_uint(float(man) * 0x1p-9f));
  return __uint_as_float(sign | (uint32_t(exp - 7 + 127) << 23) | (uint32_t(man) << 20));
}

// Input already clamped to [-448, 448] by the callers (as the reference does). Round to nearest
// even; sm_89+ converts in hardware (cvt.rn.satfinite: the same code for every input in range,
// NaN → 0x7f), older targets in software.
__device__ __forceinline__ uint8_t float_to_e4m3(float f) {
  if (isnan(f)) return 0x7f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
  return uint8_t(r & 0xff);
#else
  const uint8_t sign = signbit(f) ? 0x80 : 0;
  const float a = fabsf(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0x1p-6f) {  // subnormal quantum 2^-9; q = 8 is the smallest normal, code 8 too
    const int q = __float2int_rn(a * 512.0f);
    return sign | uint8_t(q);
  }
  int e = int((__float_as_uint(a) >> 23) & 0xff) - 127;  // floor(log2 a)
  const float quantum = __uint_as_float(uint32_t(e - 3 + 127) << 23);
  int q = __float2int_rn(a / quantum);  // 8..16
  if (q == 16) {
    q = 8;
    ++e;
  }
  if (e > 8 || (e == 8 && q - 8 > 6)) return sign | 0x7e;
  return sign | uint8_t(((e + 7) << 3) | (q - 8));
#endif
}

__device__ __forceinline__ float e8m0_to_float(uint8_t b) {
  if (b == 0xff) return __uint_as_float(0x7fc00000u);
  if (b == 0) return __uint_as_float(0x00400000u);  // 2^-127
  return __uint_as_float(uint32_t(b) << 23);
}

// E2M1 without lookup tables (a dynamically indexed local array lives in local memory: ~20
// dependent local accesses per value, the bulk of the Q4 simulations' time). Magnitudes of codes
// 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6 = c / 2 for c < 2, else (1 + (c & 1) / 2)·2^(c / 2 − 1).
__device__ __forceinline__ float e2m1_to_float(uint8_t nib) {
  const int c = nib & 7;
  const float m = c < 2 ? 0.5f * float(c) : (1.0f + 0.5f * float(c & 1)) * float(1 << ((c >> 1) - 1));
  return (nib & 8) ? -m : m;
}

// Round to nearest even on the E2M1 grid, saturating at 6 (NaN → 0): the code counts the midpoints
// 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 below |f|; a tie rounds up where the lower code is odd (the
// midpoints 0.75, 1.75 and 3.5).
__device__ __forceinline__ uint8_t float_to_e2m1(float f) {
  if (isnan(f)) return 0;
  const uint8_t sign = signbit(f) ? 8 : 0;
  const float a = fabsf(f);
  const int code = int(a > 0.25f) + int(a > 0.75f) + int(a > 1.25f) + int(a > 1.75f) + int(a > 2.5f) +
                   int(a > 3.5f) + int(a > 5.0f) + int(a == 0.75f || a == 1.75f || a == 3.5f);
  return uint8_t(sign | code);
}

// One value of a Q4 block simulation: bf16(e2m1(clamp(v / sc, ±6))·sc), inv = 1 / sc (sc a power
// of two, so v·inv == v / sc exactly).
__device__ __forceinline__ float q4_sim_value(float v, float inv, float sc) {
  return round_bf16(e2m1_to_float(float_to_e2m1(fminf(fmaxf(v * inv, -6.0f), 6.0f))) * sc);
}

// 2^k as a float for k in [-126, 127] (normal range; the scales never leave it).
__device__ __forceinline__ float pow2f(int k) { return __uint_as_float(uint32_t(k + 127) << 23); }

__device__ __forceinline__ int ceil_log2_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  return int((u >> 23) & 0xff) - 127 + ((u & 0x7fffffu) != 0 ? 1 : 0);
}
__device__ __forceinline__ float q8_block_scale(float amax) {
  return pow2f(ceil_log2_bits(fmaxf(amax, 1e-4f) * (1.0f / 448.0f)));
}
__device__ __forceinline__ float q4_block_scale(float amax) {
  return pow2f(ceil_log2_bits(fmaxf(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f)));
}

__device__ __forceinline__ float dexpf(float x) { return float(exp(double(x))); }
__device__ __forceinline__ float sigmoidf_ref(float v) { return 1.0f / (1.0f + dexpf(-v)); }

// FP64 tensor-core MMA, sm_80+: d (16 × 8) += a (16 × 16) · b (16 × 8). Each output is the chain
// fma(a15, b15, … fma(a0, b0, d)) in k order, rounding every step (fp64_mma_test.cu pins this),
// i.e. the same bits as a thread's __fma_rn loop. Fragments (g = lane / 4, t = lane % 4):
// a[i] = A[g + 8·(i % 2)][t + 4·(i / 2)], b[i] = B[t + 4i][g], d[i] = D[g + 8·(i / 2)][2t + (i % 2)].
__device__ __forceinline__ void dmma_m16n8k16(double (&d)[4], const double (&a)[8], const double (&b)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7, %8, %9, %10, %11}, "
      "{%12, %13, %14, %15}, {%0, %1, %2, %3};\n"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]), "d"(b[1]),
        "d"(b[2]), "d"(b[3]));
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Inclusive prefix sum of v over the lanes of a full warp (lane l: Σ of lanes 0..l).
__device__ __forceinline__ int warp_inclusive_sum(int v, int lane) {
  for (int off = 1; off < 32; off <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += u;
  }
  return v;
}

// Block-wide double sum (blockDim.x a multiple of 32, ≤ 1024); result valid in every thread.
// acc + x² + y² + z² + w² in double, in that order (exact squares of fp32 values).
__device__ __forceinline__ double add_squares(double acc, const float4& v) {
  acc += double(v.x) * double(v.x);
  acc += double(v.y) * double(v.y);
  acc += double(v.z) * double(v.z);
  acc += double(v.w) * double(v.w);
  return acc;
}

__device__ __forceinline__ double block_sum(double v, double* shared32) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  double t = 0.0;
  const int nw = blockDim.x >> 5;
  for (int i = 0; i < nw; ++i) t += shared32[i];
  return t;
}

// RoPE of pair i of a row's rotary part v [2·pairs] at position pos (table [*, pairs, 2]
// {cos, sin}); each output rounded to bf16. inverse rotates by −angle.
// The rotation of one pair (a, b) by (c, sn), each output rounded to bf16: rope_pair's arithmetic.
__device__ inline float2 rope_rotate(float a, float b, float c, float sn) {
  return make_float2(round_bf16(a * c - b * sn), round_bf16(a * sn + b * c));
}
__device__ inline void rope_pair(float* v, const float* __restrict__ table, int64_t pos, int pairs, int i,
                                 bool inverse) {
  const float c = table[(pos * pairs + i) * 2];
  const float sn = inverse ? -table[(pos * pairs + i) * 2 + 1] : table[(pos * pairs + i) * 2 + 1];
  const float2 r = rope_rotate(v[2 * i], v[2 * i + 1], c, sn);
  v[2 * i] = r.x;
  v[2 * i + 1] = r.y;
}

}  // namespace dsv4::gpu
