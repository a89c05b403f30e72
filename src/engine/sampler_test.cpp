#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>
#include <algorithm>

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

// Reference draw: the whole candidate list sorted first (descending, ties by smaller id), the
// total summed in that order, then top_p and the walk — what draw() computes with lazily sorted
// blocks. Same RNG stream as Sampler (mt19937_64(seed), 53-bit uniforms).
int32_t reference_draw(std::vector<float> logits, const SamplingParams& p, std::mt19937_64& rng) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  std::vector<std::pair<float, int32_t>> c;
  const float min_rel = p.min_p > 0 ? std::log(p.min_p) : -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float rel = static_cast<float>((logits[i] - mx) * (1.0 / p.temperature));
    if (rel != -INFINITY && rel >= min_rel) c.emplace_back(rel, static_cast<int32_t>(i));
  }
  const auto better = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::sort(c.begin(), c.end(), better);
  if (p.top_k > 0 && static_cast<int64_t>(c.size()) > p.top_k) c.resize(static_cast<size_t>(p.top_k));
  std::vector<float> pr;
  double total = 0;
  for (const auto& e : c) total += pr.emplace_back(static_cast<float>(std::exp(static_cast<double>(e.first))));
  size_t keep = c.size();
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (keep = 0; keep < c.size();) {
      cum += pr[keep++];
      if (cum >= p.top_p * total) break;
    }
    total = cum;
  }
  double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  for (size_t i = 0; i < keep; ++i) {
    if (u < pr[i]) return c[i].second;
    u -= pr[i];
  }
  return c[keep - 1].second;
}

// The lazily sorted draw picks the reference's token (a 129,280-entry row once, where the block
// growth runs to the full sort, and small rows with ties) under temperature, top_k, top_p, min_p.
TEST(Sampler, LazySortDrawsTheReferenceToken) {
  std::mt19937 g(5);
  std::normal_distribution<float> d(0.0f, 2.0f);
  struct Mode {
    float t, top_p, min_p;
    int32_t top_k;
  };
  const Mode modes[] = {{1.0f, 1.0f, 0.0f, -1}, {0.7f, 0.9f, 0.0f, -1}, {1.0f, 1.0f, 0.0f, 50},
                        {1.3f, 0.95f, 0.0f, 300}, {1.0f, 0.5f, 0.05f, -1}};
  for (const int vocab : {7, 300, 129280}) {
    for (const Mode& m : modes) {
      SamplingParams p;
      p.temperature = m.t;
      p.top_p = m.top_p;
      p.min_p = m.min_p;
      p.top_k = m.top_k;
      const uint64_t seed = 1000 + vocab;
      Sampler s(p, vocab, seed, {});
      std::mt19937_64 ref_rng(seed);
      const int draws = vocab > 1000 ? 3 : 300;
      for (int i = 0; i < draws; ++i) {
        std::vector<float> l(static_cast<size_t>(vocab));
        for (float& v : l) v = vocab == 7 ? std::round(d(g)) : d(g);  // rounded: many ties
        const int32_t want = reference_draw(l, p, ref_rng);
        EXPECT_EQ(s.sample(l, nullptr), want) << "vocab " << vocab << " t " << m.t << " top_p " << m.top_p
                                               << " top_k " << m.top_k << " draw " << i;
      }
    }
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
