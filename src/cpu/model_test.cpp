// Whole-model properties of the CPU backend on the embedded tiny model (every layer kind).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cpu/model.h"
#include "model/embedded_model.h"

namespace dsv4::cpu {
namespace {

const CpuModel& embedded_model() {
  static const std::unique_ptr<CpuModel> model = [] {
    const auto config = model::ModelConfig::from_json(model::embedded_tiny_config_json());
    return CpuModel::from_checkpoint(config, model::embedded_tiny_checkpoint(/*seed=*/0));
  }();
  return *model;
}

std::vector<int32_t> random_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, 128000);
  std::vector<int32_t> t(n);
  for (auto& v : t) v = dist(rng);
  return t;
}

// Runs the prompt in chunks (each told the whole prompt length), then `decode` more tokens one
// at a time; returns the logits of every call's last position, concatenated.
std::vector<float> run_split(const std::vector<int32_t>& prompt, const std::vector<int>& chunks,
                             const std::vector<int32_t>& decode) {
  const CpuModel& m = embedded_model();
  SequenceState s = m.new_sequence();
  std::vector<float> last;
  size_t at = 0;
  for (int c : chunks) {
    std::span<const int32_t> part(prompt.data() + at, static_cast<size_t>(c));
    last = m.forward(s, part, false, static_cast<int64_t>(prompt.size())).logits;
    at += static_cast<size_t>(c);
  }
  EXPECT_EQ(at, prompt.size());
  std::vector<float> all = last;
  for (int32_t t : decode) {
    auto out = m.forward(s, std::span(&t, 1));
    all.insert(all.end(), out.logits.begin(), out.logits.end());
  }
  return all;
}

}  // namespace

TEST(CpuModel, ChunkedPrefillEqualsOneShotBitwise) {
  // 300 tokens: several CSA/HCA boundaries (ratio 4 and 128) and a window wrap.
  const auto prompt = random_tokens(300, 1);
  const auto decode = random_tokens(6, 2);
  const auto one_shot = run_split(prompt, {300}, decode);
  for (const auto& chunks : std::vector<std::vector<int>>{{100, 37, 163}, {1, 2, 125, 172}, {129, 171}}) {
    const auto split = run_split(prompt, chunks, decode);
    ASSERT_EQ(split.size(), one_shot.size());
    for (size_t i = 0; i < split.size(); ++i) ASSERT_EQ(split[i], one_shot[i]) << "index " << i;
  }
}

TEST(CpuModel, ShortChunkedPrefillEqualsOneShotBitwise) {
  const auto prompt = random_tokens(23, 3);
  const auto one_shot = run_split(prompt, {23}, {});
  std::vector<int> ones(23, 1);
  for (const auto& chunks : std::vector<std::vector<int>>{{5, 18}, {3, 4, 16}, ones}) {
    const auto split = run_split(prompt, chunks, {});
    for (size_t i = 0; i < split.size(); ++i) ASSERT_EQ(split[i], one_shot[i]) << "index " << i;
  }
}

TEST(CpuModel, RejectsTokensOutsideTheVocabulary) {
  const CpuModel& m = embedded_model();
  SequenceState s = m.new_sequence();
  const std::vector<int32_t> bad = {5, 129280};
  EXPECT_THROW(m.forward(s, bad), std::exception);
}

TEST(CpuModel, LogitsAreFiniteAndDependOnContext) {
  const CpuModel& m = embedded_model();
  SequenceState a = m.new_sequence(), b = m.new_sequence();
  const std::vector<int32_t> pa = {10, 20, 30, 40}, pb = {11, 20, 30, 40};
  const auto la = m.forward(a, pa).logits, lb = m.forward(b, pb).logits;
  ASSERT_EQ(la.size(), 129280u);
  double diff = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    ASSERT_TRUE(std::isfinite(la[i]));
    diff += std::fabs(la[i] - lb[i]);
  }
  EXPECT_GT(diff, 0.0);
}

}  // namespace dsv4::cpu
