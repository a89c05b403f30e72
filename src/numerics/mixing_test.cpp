// Sinkhorn split (spec §4.3) and the indexer's Hadamard (spec §4.0).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "numerics/formats.h"
#include "numerics/hadamard.h"
#include "numerics/sinkhorn.h"

namespace dsv4::numerics {
namespace {

// Straightforward double-precision statement of the Sinkhorn formula, for comparison.
std::vector<double> sinkhorn_double(const double logits[16], int iters, double eps) {
  std::vector<double> c(16);
  for (int i = 0; i < 4; ++i) {
    double m = -1e300, s = 0;
    for (int j = 0; j < 4; ++j) m = std::max(m, logits[i * 4 + j]);
    for (int j = 0; j < 4; ++j) s += std::exp(logits[i * 4 + j] - m);
    for (int j = 0; j < 4; ++j) c[i * 4 + j] = std::exp(logits[i * 4 + j] - m) / s + eps;
  }
  auto cols = [&] {
    for (int j = 0; j < 4; ++j) {
      double s = 0;
      for (int i = 0; i < 4; ++i) s += c[i * 4 + j];
      for (int i = 0; i < 4; ++i) c[i * 4 + j] /= s + eps;
    }
  };
  auto rows = [&] {
    for (int i = 0; i < 4; ++i) {
      double s = 0;
      for (int j = 0; j < 4; ++j) s += c[i * 4 + j];
      for (int j = 0; j < 4; ++j) c[i * 4 + j] /= s + eps;
    }
  };
  cols();
  for (int k = 0; k < iters - 1; ++k) {
    rows();
    cols();
  }
  return c;
}

}  // namespace

TEST(Sinkhorn, PreAndPostFormulas) {
  std::vector<float> mixes(24, 0.0f), base(24, 0.0f), scale = {1.0f, 1.0f, 1.0f};
  base[0] = std::log(3.0f);  // sigmoid = 0.75
  base[4] = -std::log(3.0f); // 2*sigmoid = 0.5
  std::vector<float> pre(4), post(4), comb(16);
  hc_split_sinkhorn(mixes, scale, base, 4, 20, 1e-6f, pre, post, comb);
  EXPECT_FLOAT_EQ(pre[0], 0.75f + 1e-6f);
  EXPECT_FLOAT_EQ(pre[1], 0.5f + 1e-6f);
  EXPECT_FLOAT_EQ(post[0], 0.5f);  // no eps on post
  EXPECT_FLOAT_EQ(post[1], 1.0f);
  for (float v : comb) EXPECT_NEAR(v, 0.25f, 1e-6);  // uniform logits stay uniform
}

TEST(Sinkhorn, ExactlyTwentyIterationsOnAHandCase) {
  // Two rows prefer column 0: the matrix converges slowly, so 19 and 20 iterations differ.
  const double logits[16] = {6, 0, 0, 0, 6, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 6};
  std::vector<float> mixes(24, 0.0f), base(24, 0.0f), scale = {1.0f, 1.0f, 0.5f};
  for (int k = 0; k < 16; ++k) mixes[8 + k] = static_cast<float>(2 * logits[k]);  // × scale 0.5
  std::vector<float> pre(4), post(4), comb(16);
  hc_split_sinkhorn(mixes, scale, base, 4, 20, 1e-6f, pre, post, comb);
  const auto want20 = sinkhorn_double(logits, 20, 1e-6);
  const auto want19 = sinkhorn_double(logits, 19, 1e-6);
  double diff_19_20 = 0;
  for (int k = 0; k < 16; ++k) {
    EXPECT_NEAR(comb[k], want20[k], 2e-6) << k;
    diff_19_20 = std::max(diff_19_20, std::fabs(want20[k] - want19[k]));
  }
  EXPECT_GT(diff_19_20, 1e-4);  // the case can tell 19 iterations from 20
  // Columns sum to ~1 after the final column normalization.
  for (int j = 0; j < 4; ++j) {
    float s = 0;
    for (int i = 0; i < 4; ++i) s += comb[i * 4 + j];
    EXPECT_NEAR(s, 1.0f, 1e-5);
  }
}

TEST(Hadamard, SylvesterOrderAndScale) {
  std::vector<float> x(128, 0.0f);
  x[1] = 1.0f;  // row 1 of H: (+,-,+,-,...)
  hadamard_bf16(x);
  const float v = round_bf16(1.0f / std::sqrt(128.0f));
  for (int j = 0; j < 128; ++j) EXPECT_EQ(x[j], (j & 1) ? -v : v) << j;
}

TEST(Hadamard, IsOrthogonal) {
  std::vector<std::vector<float>> rows(128, std::vector<float>(128, 0.0f));
  for (int i = 0; i < 128; ++i) {
    rows[i][i] = 1.0f;
    hadamard_bf16(rows[i]);
  }
  for (int a = 0; a < 128; a += 7) {
    for (int b = 0; b < 128; b += 5) {
      double dot = 0;
      for (int k = 0; k < 128; ++k) dot += static_cast<double>(rows[a][k]) * rows[b][k];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 5e-3) << a << "," << b;
    }
  }
  // Applying it twice returns the input (H·H = n·I) up to bf16 rounding.
  std::vector<float> x(128);
  for (int k = 0; k < 128; ++k) x[k] = round_bf16(std::sin(k * 0.37f));
  auto y = x;
  hadamard_bf16(y);
  hadamard_bf16(y);
  for (int k = 0; k < 128; ++k) EXPECT_NEAR(y[k], x[k], 1e-2);
}

TEST(Hadamard, RejectsNonPowerOfTwo) {
  std::vector<float> x(96);
  EXPECT_THROW(hadamard_bf16(x), std::exception);
}

}  // namespace dsv4::numerics
