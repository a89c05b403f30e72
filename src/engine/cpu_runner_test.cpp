// CpuRunner keeps every per-sequence state in the KvCacheManager pools: same logits as the
// dense CPU model, chunked prefill bit-identical, and a sequence exported page by page and
// imported elsewhere continues with identical logits (what PD disaggregation needs).
#include <gtest/gtest.h>

#include <random>

#include "engine/cache_manager.h"
#include "engine/cpu_runner.h"
#include "model/embedded_model.h"

namespace dsv4::engine {
namespace {

std::shared_ptr<const cpu::CpuModel> tiny_model() {
  static std::shared_ptr<const cpu::CpuModel> model = [] {
    const auto config = model::ModelConfig::from_json(model::embedded_tiny_config_json());
    return std::shared_ptr<const cpu::CpuModel>(
        cpu::CpuModel::from_checkpoint(config, model::embedded_tiny_checkpoint()));
  }();
  return model;
}

std::vector<int32_t> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& v : t) v = static_cast<int32_t>(rng() % 128000);
  return t;
}

struct Harness {
  CpuRunner runner{tiny_model()};
  KvCacheManager cache{runner.cache_layout(), int64_t{512} << 20, 4, 1024};
  Harness() { runner.bind_cache(cache); }

  // Appends `toks` to seq at its current length; returns the last logits.
  std::vector<float> step(SequenceId seq, std::span<const int32_t> toks, int64_t prompt_length = 0) {
    if (!cache.contains(seq)) cache.allocate(seq);
    const int64_t start = cache.table(seq).num_tokens;
    EXPECT_TRUE(cache.append(seq, static_cast<int64_t>(toks.size())));
    ModelRunner::Item item{seq, start, toks, &cache.table(seq), prompt_length};
    std::vector<float> logits(static_cast<size_t>(runner.vocab_size()));
    runner.forward(std::span(&item, 1), logits);
    return logits;
  }
};

}  // namespace

TEST(CpuRunner, MatchesDenseModelAndChunksBitwise) {
  const auto prompt = tokens(150, 11), more = tokens(5, 12);
  auto model = tiny_model();
  cpu::SequenceState dense = model->new_sequence();
  std::vector<std::vector<float>> want = {model->forward(dense, prompt).logits};
  for (int32_t t : more) want.push_back(model->forward(dense, std::span(&t, 1)).logits);

  Harness h;
  std::vector<std::vector<float>> got;
  std::span<const int32_t> p(prompt);
  h.step(1, p.subspan(0, 60), 150);
  got.push_back(h.step(1, p.subspan(60), 150));
  for (int32_t t : more) got.push_back(h.step(1, std::span(&t, 1)));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "call " << i;
}

TEST(CpuRunner, ExportImportContinuesIdentically) {
  const auto prompt = tokens(140, 21), more = tokens(6, 22);
  Harness a, b;
  a.step(1, prompt);
  const SerializedState state = a.cache.export_pages(1);
  b.cache.import_pages(7, state);
  for (int32_t t : more) {
    const auto la = a.step(1, std::span(&t, 1));
    const auto lb = b.step(7, std::span(&t, 1));
    ASSERT_EQ(la, lb);
  }
  a.cache.free(1);
  b.cache.free(7);
  EXPECT_EQ(a.cache.num_sequences(), 0);
}

}  // namespace dsv4::engine
