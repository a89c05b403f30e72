// Bit-level number formats of DeepSeek-V4 checkpoints and activations (spec §3.3, §4.0).
//
//  bf16   : 1s/8e/7m, conversion from fp32 rounds to nearest even, NaN stays NaN.
//  e4m3   : OCP float8_e4m3fn, 1s/4e/3m, bias 7, max ±448, no inf, 0x7F/0xFF = NaN.
//           Encoding rounds to nearest even; finite values beyond ±448 saturate to ±448
//           (the reference clamps to ±448 before every cast, so saturation never changes
//           a reference value). −0 encodes as 0x80.
//  e8m0   : float8_e8m0fnu, unsigned exponent: value 2^(byte−127), byte 255 = NaN, no zero.
//  e2m1   : FP4 nibble, codes 0..7 = 0, .5, 1, 1.5, 2, 3, 4, 6; 8..15 the same negated.
//           Encoding rounds to nearest, ties to the even code; beyond ±6 saturates.
//  Packed FP4 byte: element 2j in the low nibble, element 2j+1 in the high nibble.
//
// All functions are pure, header-only and usable from host code of CUDA files.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace dsv4::numerics {

// ---- bf16 -------------------------------------------------------------------------------
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }
// Rounds an fp32 value to the nearest bf16 value (returned as fp32).
inline float round_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

// A bf16 value stored as its 16 bits (the checkpoint's BF16 layout).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(float_to_bf16_bits(f)) {}
  static bf16 from_bits(uint16_t b) {
    bf16 v;
    v.bits = b;
    return v;
  }
  explicit operator float() const { return bf16_bits_to_float(bits); }
  float f() const { return bf16_bits_to_float(bits); }
};
static_assert(sizeof(bf16) == 2);

// ---- e4m3 -------------------------------------------------------------------------------
inline float e4m3_to_float(uint8_t b) {
  const int sign = b >> 7;
  const int exp = (b >> 3) & 0xf;
  const int man = b & 0x7;
  if (exp == 0xf && man == 0x7) return std::numeric_limits<float>::quiet_NaN();
  float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -9)               // subnormal
                       : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return sign ? -mag : mag;
}

inline uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // saturate (also +-inf)
  // Quantum of the binade containing a (subnormal quantum 2^-9 below 2^-6).
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp_unbiased = e - 1;
  if (exp_unbiased < -6) exp_unbiased = -6;
  const float quantum = std::ldexp(1.0f, exp_unbiased - 3);
  float q = std::nearbyint(a / quantum) * quantum;  // default rounding mode: nearest even
  if (q >= 448.0f) return sign | 0x7e;
  if (q == 0.0f) return sign;
  int qe;
  std::frexp(q, &qe);
  int biased = qe - 1 + 7;
  uint8_t code;
  if (biased <= 0) {
    code = static_cast<uint8_t>(std::lround(q / std::ldexp(1.0f, -9)));  // subnormal mantissa
  } else {
    int man = static_cast<int>(std::lround((q / std::ldexp(1.0f, qe - 1) - 1.0f) * 8.0f));
    code = static_cast<uint8_t>((biased << 3) | man);
  }
  return sign | code;
}

// ---- e8m0 -------------------------------------------------------------------------------
inline float e8m0_to_float(uint8_t b) {
  if (b == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(b) - 127);
}
// Exponent byte of a power of two p = 2^k (k in [-127, 127]).
inline uint8_t pow2_to_e8m0(float p) {
  int e;
  std::frexp(p, &e);
  return static_cast<uint8_t>(e - 1 + 127);
}

// ---- e2m1 -------------------------------------------------------------------------------
inline float e2m1_to_float(uint8_t nibble) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMag[nibble & 7];
  return (nibble & 8) ? -m : m;
}

inline uint8_t float_to_e2m1(float f) {
  if (std::isnan(f)) return 0;  // no NaN code in e2m1; the reference never produces one
  const uint8_t sign = std::signbit(f) ? 8 : 0;
  const float a = std::fabs(f);
  // Midpoints between consecutive magnitudes; at an exact midpoint pick the even code.
  static constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t code = 0;
  while (code < 7 && a > kMid[code]) ++code;
  if (code < 7 && a == kMid[code] && (code & 1)) ++code;  // tie: round to even code
  // a == kMid[code] with code even already lies below: keep `code` (the even one).
  return sign | code;
}

// Unpacks logical element k of a packed FP4 row (low nibble first).
inline uint8_t fp4_nibble(const uint8_t* packed_row, int64_t k) {
  const uint8_t byte = packed_row[k >> 1];
  return (k & 1) ? (byte >> 4) : (byte & 0xf);
}

// ---- power-of-two scales ----------------------------------------------------------------
// ceil(log2(x)) for a positive normal fp32 x, by the kernels' bit trick: the exponent field
// minus 127, plus one when the mantissa is non-zero. Exact at powers of two.
inline int ceil_log2_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127;
  return exp + ((u & 0x7fffffu) != 0 ? 1 : 0);
}

}  // namespace dsv4::numerics
