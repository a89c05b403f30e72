// Hand-computed cases for the bit formats (spec §3.3): E4M3, E8M0, E2M1, bf16.
#include <gtest/gtest.h>

#include <cmath>

#include "numerics/formats.h"

namespace dsv4::numerics {

TEST(E4M3, SaturatesAtPlusMinus448) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-448.0f), 0xfe);
  EXPECT_EQ(float_to_e4m3(460.0f), 0x7e);  // would round to 448 anyway
  EXPECT_EQ(float_to_e4m3(1e9f), 0x7e);    // saturating conversion, never NaN
  EXPECT_EQ(float_to_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xfe), -448.0f);
}

TEST(E4M3, NanCodesAndNegativeZero) {
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  EXPECT_EQ(float_to_e4m3(NAN), 0x7f);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
  EXPECT_EQ(e4m3_to_float(0x80), 0.0f);
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
}

TEST(E4M3, RoundHalfEvenAtMidpoints) {
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x39), 1.125f);
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);   // midpoint 1 | 1.125 -> even mantissa 0
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);   // midpoint 1.125 | 1.25 -> even mantissa 2
  EXPECT_EQ(float_to_e4m3(1.0626f), 0x39);   // just above the midpoint
  EXPECT_EQ(float_to_e4m3(-1.0625f), 0xb8);
  EXPECT_EQ(float_to_e4m3(0x1p-10f), 0x00);  // subnormal midpoint 0 | 2^-9 -> 0
  EXPECT_EQ(float_to_e4m3(3 * 0x1p-10f), 0x02);  // midpoint 2^-9 | 2^-8 -> code 2
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(float_to_e4m3(15.5f), 0x58);     // midpoint 15 (0x57) | 16 -> 16 (even)
}

TEST(E4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(E8M0, PowersOfTwoAndNan) {
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(130), 8.0f);
  EXPECT_EQ(e8m0_to_float(120), 0x1p-7f);
  EXPECT_EQ(e8m0_to_float(0), 0x1p-127f);
  EXPECT_TRUE(std::isnan(e8m0_to_float(255)));
  EXPECT_EQ(pow2_to_e8m0(0.25f), 125);
}

TEST(E2M1, TableAndNibbleOrder) {
  const float expect[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c)), expect[c]);
  EXPECT_TRUE(std::signbit(e2m1_to_float(8)));
  const uint8_t row[2] = {0x21, 0xf7};  // elements: 0.5, 1.0, 6, -6
  EXPECT_EQ(e2m1_to_float(fp4_nibble(row, 0)), 0.5f);
  EXPECT_EQ(e2m1_to_float(fp4_nibble(row, 1)), 1.0f);
  EXPECT_EQ(e2m1_to_float(fp4_nibble(row, 2)), 6.0f);
  EXPECT_EQ(e2m1_to_float(fp4_nibble(row, 3)), -6.0f);
}

TEST(E2M1, TiesRoundToEvenCode) {
  EXPECT_EQ(float_to_e2m1(0.25f), 0);   // 0 | 0.5
  EXPECT_EQ(float_to_e2m1(0.75f), 2);   // 0.5 | 1   -> 1 (code 2)
  EXPECT_EQ(float_to_e2m1(1.25f), 2);   // 1 | 1.5   -> 1
  EXPECT_EQ(float_to_e2m1(1.75f), 4);   // 1.5 | 2   -> 2
  EXPECT_EQ(float_to_e2m1(2.5f), 4);    // 2 | 3     -> 2
  EXPECT_EQ(float_to_e2m1(3.5f), 6);    // 3 | 4     -> 4
  EXPECT_EQ(float_to_e2m1(5.0f), 6);    // 4 | 6     -> 4 (ties away from zero would give 6)
  EXPECT_EQ(float_to_e2m1(-5.0f), 14);
  EXPECT_EQ(float_to_e2m1(5.01f), 7);
  EXPECT_EQ(float_to_e2m1(0.26f), 1);
  EXPECT_EQ(float_to_e2m1(9.0f), 7);    // saturates
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is the midpoint between 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_TRUE(std::isnan(round_bf16(NAN)));
}

TEST(CeilLog2, ExactAtPowersOfTwo) {
  EXPECT_EQ(ceil_log2_bits(1.0f), 0);
  EXPECT_EQ(ceil_log2_bits(2.0f), 1);
  EXPECT_EQ(ceil_log2_bits(0.5f), -1);
  EXPECT_EQ(ceil_log2_bits(1.5f), 1);
  EXPECT_EQ(ceil_log2_bits(3.0f), 2);
  EXPECT_EQ(ceil_log2_bits(std::nextafter(2.0f, 0.0f)), 1);
  EXPECT_EQ(ceil_log2_bits(std::nextafter(2.0f, 4.0f)), 2);
}

}  // namespace dsv4::numerics
