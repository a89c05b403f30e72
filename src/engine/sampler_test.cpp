#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/text_stream.h"

namespace dsv4::engine {
namespace {

std::vector<float> row(std::initializer_list<float> v) { return std::vector<float>(v); }

TEST(Sampler, GreedyPicksArgmaxAndMasksOutOfRange) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p, /*sample_vocab=*/3, 1, {});
  auto l = row({0.1f, 2.0f, 0.5f, 9.0f});  // id 3 is outside the tokenizer's range
  EXPECT_EQ(s.sample(l, nullptr), 1);
}

TEST(Sampler, NeverSamplesOutsideVocab) {
  SamplingParams p;
  p.temperature = 2.0f;
  Sampler s(p, 4, 123, {});
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> l(8, 5.0f);
    EXPECT_LT(s.sample(l, nullptr), 4);
  }
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  Sampler a(p, 50, 42, {}), b(p, 50, 42, {});
  for (int i = 0; i < 200; ++i) {
    std::vector<float> la(50), lb;
    for (int v = 0; v < 50; ++v) la[v] = std::sin(float(v * 7 + i));
    lb = la;
    EXPECT_EQ(a.sample(la, nullptr), b.sample(lb, nullptr));
  }
}

TEST(Sampler, TopKRestrictsCandidates) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  Sampler s(p, 5, 9, {});
  for (int i = 0; i < 500; ++i) {
    auto l = row({1.0f, 3.0f, 2.9f, 0.5f, 0.0f});
    const int32_t t = s.sample(l, nullptr);
    EXPECT_TRUE(t == 1 || t == 2);
  }
}

TEST(Sampler, TopPAndMinPRestrictCandidates) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;
  Sampler s(p, 3, 9, {});
  for (int i = 0; i < 300; ++i) {
    auto l = row({5.0f, 0.0f, 0.0f});
    EXPECT_EQ(s.sample(l, nullptr), 0);
  }
  SamplingParams q;
  q.min_p = 0.5f;
  Sampler m(q, 3, 5, {});
  for (int i = 0; i < 300; ++i) {
    auto l = row({2.0f, 1.9f, 0.0f});  // p2/p0 = e^-2 < 0.5
    EXPECT_NE(m.sample(l, nullptr), 2);
  }
}

TEST(Sampler, TemperatureMatchesDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  Sampler s(p, 2, 77, {});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto l = row({0.0f, std::log(3.0f)});
    ones += s.sample(l, nullptr) == 1;
  }
  EXPECT_NEAR(double(ones) / n, 0.75, 0.02);
}

TEST(Sampler, PenaltiesChangeTheChoice) {
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 2.0f;
  Sampler s(p, 3, 1, {});
  s.observe(0);
  auto l = row({1.0f, 0.5f, 0.0f});
  EXPECT_EQ(s.sample(l, nullptr), 1);

  SamplingParams r;
  r.temperature = 0;
  r.repetition_penalty = 4.0f;
  const std::vector<int32_t> prompt = {0};
  Sampler rs(r, 3, 1, prompt);
  auto l2 = row({1.0f, 0.5f, 0.0f});
  EXPECT_EQ(rs.sample(l2, nullptr), 1);

  SamplingParams f;
  f.temperature = 0;
  f.frequency_penalty = 0.3f;
  Sampler fs(f, 3, 1, {});
  fs.observe(0);
  fs.observe(0);
  auto l3 = row({1.0f, 0.5f, 0.0f});
  EXPECT_EQ(fs.sample(l3, nullptr), 1);
}

TEST(Sampler, LogprobsAndTopLogprobs) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = true;
  p.top_logprobs = 2;
  Sampler s(p, 3, 1, {});
  auto l = row({0.0f, std::log(3.0f), 0.0f});
  TokenLogprob lp;
  EXPECT_EQ(s.sample(l, &lp), 1);
  EXPECT_NEAR(lp.logprob, std::log(0.6), 1e-5);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 0);  // ties broken by smaller id
  EXPECT_NEAR(lp.top[1].second, std::log(0.2), 1e-5);
}

TEST(StopMatcher, MatchesAcrossPiecesAndHoldsPrefixes) {
  StopMatcher m({"END", "xyz"});
  auto r = m.push("hello E");
  EXPECT_EQ(r.emit, "hello ");
  EXPECT_FALSE(r.stopped);
  r = m.push("N");
  EXPECT_EQ(r.emit, "");
  r = m.push("Dtail");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(r.matched, "END");
}

TEST(StopMatcher, ReleasesFalseStartsAndFlushes) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.push("xa").emit, "x");
  EXPECT_EQ(m.push("bd").emit, "abd");
  EXPECT_EQ(m.push("ab").emit, "");
  EXPECT_EQ(m.flush(), "ab");
  StopMatcher none;
  EXPECT_EQ(none.push("abc").emit, "abc");
}

}  // namespace
}  // namespace dsv4::engine
