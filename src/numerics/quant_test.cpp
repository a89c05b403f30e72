// Q8 / Q4 activation quantizers: hand-computed scales and values, plus random properties.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "numerics/quant.h"

namespace dsv4::numerics {

TEST(Q8, ScaleIsPowerOfTwoFromBitTrick) {
  EXPECT_EQ(q8_block_scale(448.0f), 1.0f);  // amax*fp32(1/448) is exactly 1
  EXPECT_EQ(q8_block_scale(std::nextafter(448.0f, 1e9f)), 2.0f);
  EXPECT_EQ(q8_block_scale(896.0f), 2.0f);
  EXPECT_EQ(q8_block_scale(1.0f), 0x1p-8f);  // 1/448 = 2^-8.81 -> 2^-8
  EXPECT_EQ(q8_block_scale(0.0f), 0x1p-22f);  // floor 1e-4: 2.23e-7 -> 2^-22
  EXPECT_EQ(q8_block_scale(1e-6f), 0x1p-22f);
}

TEST(Q4, ScaleIsPowerOfTwoFromBitTrick) {
  EXPECT_EQ(q4_block_scale(6.0f), 1.0f);
  EXPECT_EQ(q4_block_scale(12.0f), 2.0f);
  EXPECT_EQ(q4_block_scale(1.0f), 0.25f);  // 1/6 -> 2^-2
  EXPECT_EQ(q4_block_scale(0.0f), 0x1p-126f);
}

TEST(Q8, QuantizesHandCase) {
  std::vector<float> x = {448.0f, -1.0625f, 1.1875f, 0.0f};  // amax 448 -> scale 1
  std::vector<uint8_t> codes(4);
  std::vector<float> scales(1);
  quantize_q8(x, 4, codes, scales);
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(codes[0], 0x7e);
  EXPECT_EQ(codes[1], 0xb8);
  EXPECT_EQ(codes[2], 0x3a);
  EXPECT_EQ(codes[3], 0x00);
  simulate_q8(x, 4);
  EXPECT_EQ(x[1], -1.0f);
  EXPECT_EQ(x[2], 1.25f);
}

TEST(Q4, SimulatesHandCase) {
  // amax 6 -> scale 1; 5 ties to 4, 2.5 ties to 2, 0.75 ties to 1.
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;
  x[1] = 5.0f;
  x[2] = -2.5f;
  x[3] = 0.75f;
  simulate_q4(x, 32);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 4.0f);
  EXPECT_EQ(x[2], -2.0f);
  EXPECT_EQ(x[3], 1.0f);
}

TEST(Q8, RandomBlocksStayWithinHalfStep) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(128);
    for (auto& v : x) v = round_bf16(dist(rng));
    std::vector<float> y = x;
    simulate_q8(y, 64);
    for (size_t b = 0; b < 2; ++b) {
      float amax = 0;
      for (size_t i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(x[b * 64 + i]));
      const float s = q8_block_scale(amax);
      for (size_t i = 0; i < 64; ++i) {
        // e4m3 relative step 2^-3: error <= half an ulp of the value, plus bf16 rounding.
        const float v = x[b * 64 + i];
        EXPECT_LE(std::fabs(y[b * 64 + i] - v), std::max(std::fabs(v) * 0.0703f, s * 0x1p-10f))
            << v;
      }
    }
  }
}

}  // namespace dsv4::numerics
