// Sparse attention kernel semantics (spec §4.4): bf16 probabilities before P·V, the sink in
// the denominator only, −1 slots skipped, blocks of 64 with an online softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "numerics/formats.h"

namespace dsv4::cpu {
namespace {

using numerics::round_bf16;

// The same math written out directly for one block of candidates (≤ 64).
float one_block_reference(const std::vector<float>& s, const std::vector<float>& v, float sink,
                          bool bf16_probs) {
  float m = -INFINITY;
  for (float x : s) m = std::max(m, x);
  double num = 0;
  float l = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    const float p = std::exp(s[j] - m);
    l += p;
    num += static_cast<double>(bf16_probs ? round_bf16(p) : p) * v[j];
  }
  return round_bf16(static_cast<float>(num) / (l + std::exp(sink - m)));
}

}  // namespace

TEST(SparseAttention, RoundsProbabilitiesToBf16BeforePV) {
  // d = 2: dim 0 carries the score (q = (1, 0)), dim 1 the value. Scores 0 and −0.001 with
  // values +100 and −100: exp(−0.001) = 0.9990 rounds to bf16 1.0, so with bf16
  // probabilities the values cancel exactly; with fp32 probabilities ≈ 0.1 remains.
  const float q[2] = {1.0f, 0.0f};
  const float s2 = round_bf16(-0.001f);
  std::vector<float> kv = {0.0f, 100.0f, s2, -100.0f};
  std::vector<const float*> cand = {&kv[0], &kv[2]};
  float out[2];
  sparse_attention_head(q, cand, /*sink=*/-30.0f, /*softmax_scale=*/1.0f, out);
  EXPECT_EQ(out[1], 0.0f);
  const std::vector<float> s = {0.0f, s2}, v = {100.0f, -100.0f};
  EXPECT_EQ(out[1], one_block_reference(s, v, -30.0f, true));
  EXPECT_GT(std::fabs(one_block_reference(s, v, -30.0f, false)), 0.04f);
}

TEST(SparseAttention, SinkOnlyInDenominatorAndInvalidSlotsSkipped) {
  const float q[2] = {1.0f, 0.0f};
  std::vector<float> kv = {2.0f, 5.0f};
  std::vector<const float*> cand = {nullptr, kv.data(), nullptr};
  float out[2];
  sparse_attention_head(q, cand, /*sink=*/2.0f, 1.0f, out);
  // One valid key with score 2: out = v / (1 + e^{sink − 2}) = v / 2.
  EXPECT_EQ(out[0], round_bf16(2.0f / 2.0f));
  EXPECT_EQ(out[1], round_bf16(5.0f / 2.0f));
  std::vector<const float*> none = {nullptr, nullptr};
  sparse_attention_head(q, none, 0.0f, 1.0f, out);
  EXPECT_EQ(out[0], 0.0f);  // no valid candidate: zero output, no NaN
}

TEST(SparseAttention, OnlineSoftmaxOverBlocksOf64MatchesTwoPassWithinRounding) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int len : {1, 63, 64, 65, 130, 640}) {
    const int d = 8;
    std::vector<float> q(d), kv(static_cast<size_t>(len) * d);
    for (auto& v : q) v = round_bf16(dist(rng));
    for (auto& v : kv) v = round_bf16(dist(rng));
    std::vector<const float*> cand;
    for (int j = 0; j < len; ++j) cand.push_back(j % 7 == 3 ? nullptr : &kv[j * d]);
    std::vector<float> out(d);
    sparse_attention_head(q, cand, 0.5f, 0.3f, out);
    // Two-pass fp64 softmax: agrees up to bf16 rounding of probabilities and output.
    double m = -1e300;
    std::vector<double> s(len, -1e300);
    for (int j = 0; j < len; ++j) {
      if (!cand[j]) continue;
      double dot = 0;
      for (int k = 0; k < d; ++k) dot += q[k] * cand[j][k];
      s[j] = dot * 0.3f;
      m = std::max(m, s[j]);
    }
    double l = std::exp(0.5 - m);
    std::vector<double> o(d, 0.0);
    for (int j = 0; j < len; ++j) {
      if (!cand[j]) continue;
      const double p = std::exp(s[j] - m);
      l += p;
      for (int k = 0; k < d; ++k) o[k] += p * cand[j][k];
    }
    for (int k = 0; k < d; ++k) EXPECT_NEAR(out[k], o[k] / l, 2e-2) << len << " " << k;
  }
}

}  // namespace dsv4::cpu
