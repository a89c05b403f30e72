// Dataset construction: lengths, determinism, ShareGPT parsing.
#include "bench/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "base/check.h"

namespace dsv4::bench {
namespace {

TEST(RandomDataset, FixedLengthsWithRatioOne) {
  const auto ps = make_random_dataset(5, 16, 8, 1.0, 512, 7);
  ASSERT_EQ(ps.size(), 5u);
  for (const auto& p : ps) {
    EXPECT_EQ(p.prompt_len, 16);
    EXPECT_EQ(p.output_len, 8);
    EXPECT_EQ(p.ids.size(), 16u);
    EXPECT_EQ(count_words(p.text), 16);
    for (int id : p.ids) {
      EXPECT_GE(id, 3);
      EXPECT_LT(id, 512);
    }
  }
}

TEST(RandomDataset, RangeRatioAndSeed) {
  const auto a = make_random_dataset(200, 100, 50, 0.5, 1000, 1);
  const auto b = make_random_dataset(200, 100, 50, 0.5, 1000, 1);
  const auto c = make_random_dataset(200, 100, 50, 0.5, 1000, 2);
  int lo = 1000, hi = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].ids, b[i].ids);
    lo = std::min(lo, a[i].prompt_len);
    hi = std::max(hi, a[i].prompt_len);
    EXPECT_GE(a[i].output_len, 25);
    EXPECT_LE(a[i].output_len, 50);
  }
  EXPECT_GE(lo, 50);
  EXPECT_LE(hi, 100);
  EXPECT_LT(lo, 60);  // the range is actually used
  EXPECT_GT(hi, 90);
  EXPECT_NE(a[0].ids, c[0].ids);
}

TEST(ShareGpt, ReadsHumanAndGptTurns) {
  const std::string path = ::testing::TempDir() + "/bench_sharegpt_test.json";
  {
    std::ofstream f(path);
    f << R"([{"id":"a","conversations":[{"from":"human","value":"one two three four five six seven eight nine ten"},
                                        {"from":"gpt","value":"a b c d e f g h i j k l m n o p q r s t"}]},
              {"id":"b","conversations":[{"from":"human","value":"only one turn"}]},
              {"id":"c","conversations":[{"from":"human","value":"hello"},{"from":"gpt","value":"hi"}]}])";
  }
  const auto ps = load_sharegpt_dataset(path, 10, 0, 1);
  ASSERT_EQ(ps.size(), 2u);  // the one-turn conversation is skipped
  for (const auto& p : ps) {
    EXPECT_TRUE(p.ids.empty());
    if (p.text == "hello") {
      EXPECT_EQ(p.prompt_len, 1);   // round(1 * 1.3)
      EXPECT_EQ(p.output_len, 1);
    } else {
      EXPECT_EQ(p.prompt_len, 13);  // 10 words * 1.3
      EXPECT_EQ(p.output_len, 26);  // 20 words * 1.3
    }
  }
  EXPECT_EQ(load_sharegpt_dataset(path, 1, 0, 1).size(), 1u);
  EXPECT_EQ(load_sharegpt_dataset(path, 10, 64, 1)[0].output_len, 64);
  EXPECT_THROW(load_sharegpt_dataset(path + ".missing", 1, 0, 1), Error);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace dsv4::bench
