// RoPE tables (spec §4.7): YaRN ramp bounds, per-layer base policy, interleaved pairs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "numerics/formats.h"
#include "numerics/rope.h"

namespace dsv4::numerics {

RopeParams compress_params() {
  return RopeParams{.rope_dim = 64, .base = 160000.0, .yarn = true, .factor = 16.0,
                    .original_seq_len = 65536, .beta_fast = 32.0, .beta_slow = 1.0};
}

TEST(Rope, YarnRampIs15To25ForBase160000) {
  int low = 0, high = 0;
  yarn_correction_range(compress_params(), &low, &high);
  EXPECT_EQ(low, 15);
  EXPECT_EQ(high, 25);
}

TEST(Rope, YarnScalesOnlyHighPairs) {
  RopeParams plain = compress_params();
  plain.yarn = false;
  const auto f = rope_frequencies(compress_params());
  const auto g = rope_frequencies(plain);
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i <= 15; ++i) EXPECT_EQ(f[i], g[i]) << i;           // ramp 0: unchanged
  for (int i = 25; i < 32; ++i) EXPECT_FLOAT_EQ(f[i], g[i] / 16) << i;  // ramp 1: divided by 16
  // pair 20: ramp 0.5 -> g/16*0.5 + g*0.5
  EXPECT_FLOAT_EQ(f[20], g[20] / 16 * 0.5f + g[20] * 0.5f);
  EXPECT_FLOAT_EQ(g[1], std::pow(160000.0f, -2.0f / 64.0f));
}

TEST(Rope, WindowLayersUseBase10000WithoutYarn) {
  RopeParams p{.rope_dim = 64, .base = 10000.0};
  const auto f = rope_frequencies(p);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_FLOAT_EQ(f[16], 0.01f);  // 10000^(-32/64)
  EXPECT_FLOAT_EQ(f[31], std::pow(10000.0f, -62.0f / 64.0f));
}

TEST(Rope, RotatesInterleavedPairsOfTheLast64Dims) {
  RopeTable table(RopeParams{.rope_dim = 64, .base = 10000.0}, 8);
  std::vector<float> x(512, 0.0f);
  x[0] = 3.0f;      // no-rope part untouched
  x[448] = 1.0f;    // pair 0 = (x[448], x[449]) with frequency 1
  x[451] = 1.0f;    // pair 1 imaginary part
  table.apply(x, /*pos=*/1);
  EXPECT_EQ(x[0], 3.0f);
  EXPECT_EQ(x[448], round_bf16(std::cos(1.0f)));
  EXPECT_EQ(x[449], round_bf16(std::sin(1.0f)));
  const float f1 = std::pow(10000.0f, -2.0f / 64.0f);
  EXPECT_EQ(x[450], round_bf16(-std::sin(f1)));
  EXPECT_EQ(x[451], round_bf16(std::cos(f1)));
  // NeoX (rotate-half) would have paired x[448] with x[480]: it must stay zero.
  EXPECT_EQ(x[480], 0.0f);
  table.apply(x, 1, /*inverse=*/true);
  EXPECT_NEAR(x[448], 1.0f, 1e-2);
  EXPECT_NEAR(x[449], 0.0f, 1e-2);
}

TEST(Rope, PositionBeyondTableThrows) {
  RopeTable table(RopeParams{}, 4);
  std::vector<float> x(64);
  EXPECT_THROW(table.apply(x, 4), std::exception);
}

}  // namespace dsv4::numerics

namespace dsv4::numerics {
TEST(Rope, UncachedPositionsMatchCachedOnes) {
  RopeTable cached(compress_params(), 5000, 5000), lazy(compress_params(), 5000, 10);
  for (int64_t pos : {0, 9, 10, 1234, 4999})
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(cached.cos(pos, i), lazy.cos(pos, i));
      EXPECT_EQ(cached.sin(pos, i), lazy.sin(pos, i));
    }
}
}  // namespace dsv4::numerics
