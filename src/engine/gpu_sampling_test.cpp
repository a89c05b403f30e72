// The GPU sampler (gpu/sampling.h) against the host Sampler it mirrors: fresh random logits rows,
// every parameter family, the same uniform per draw -> the same token, logprobs within 1e-4.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/gpu_runner.h"
#include "engine/sampler.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_model.h"
#include "gpu/sampling.h"

namespace dsv4::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  std::string name;
  SamplingParams params;
  int64_t sample_vocab = 0;  // 0: the row's vocab
  std::vector<int32_t> banned;
};

enum class RowKind { kNormal, kPeaked, kTies, kBroken };

std::vector<float> make_row(std::mt19937& rng, int64_t vocab, RowKind kind, float sigma) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> l(static_cast<size_t>(vocab));
  for (float& v : l) v = nd(rng);
  if (kind == RowKind::kPeaked) l[rng() % vocab] += 12.0f;
  if (kind == RowKind::kTies)
    for (float& v : l)
      v = std::round(v * 2.0f) / 2.0f;  // few distinct values: many exact ties, −0 next to +0
  if (kind == RowKind::kBroken)
    for (int i = 0; i < vocab / 10; ++i) l[rng() % vocab] = (i % 2) ? std::nanf("") : -kInf;
  return l;
}

// Host reference for one row: the Sampler's draw with the given uniform.
TokenLogprob host_sample(
    const Case& c, int64_t vocab, std::vector<float> row, double u, int32_t* token) {
  Sampler s(c.params, c.sample_vocab > 0 ? c.sample_vocab : vocab, 1, {});
  for (int32_t id : c.banned) row[static_cast<size_t>(id)] = -kInf;
  TokenLogprob lp;
  const bool want = c.params.logprobs || c.params.top_logprobs > 0;
  *token = s.sample(row, want ? &lp : nullptr, &u);
  return lp;
}

gpu::SampleParams device_params(const Case& c, int64_t vocab, double u) {
  Sampler s(c.params, 1, 1, {});
  const DeviceDraw d = s.prepare_device_draw();
  gpu::SampleParams p;
  p.on_device = 1;
  p.greedy = d.greedy;
  p.sample_vocab = static_cast<int32_t>(c.sample_vocab > 0 ? c.sample_vocab : vocab);
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_rel = d.min_rel;
  p.inv_temperature = d.inv_temperature;
  p.u = u;
  p.logprobs = c.params.logprobs || c.params.top_logprobs > 0;
  p.top_logprobs = c.params.top_logprobs;
  p.num_banned = static_cast<int32_t>(c.banned.size());
  std::copy(c.banned.begin(), c.banned.end(), p.banned);
  return p;
}

// gpu::sample_rows over host rows [params.size(), vocab]; the results.
std::vector<gpu::SampleResult> sample_on_device(const std::vector<float>& logits,
                                                const std::vector<gpu::SampleParams>& params,
                                                int64_t vocab) {
  const int64_t rows = static_cast<int64_t>(params.size());
  gpu::DeviceBuffer<float> d_logits;
  d_logits.upload(logits);
  gpu::DeviceBuffer<gpu::SampleParams> d_params;
  d_params.upload(params);
  gpu::DeviceBuffer<gpu::SampleResult> d_results(static_cast<size_t>(rows));
  gpu::DeviceBuffer<float> scratch(logits.size());
  gpu::sample_rows(
      d_logits.get(), rows, vocab, d_params.get(), d_results.get(), scratch.get(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return d_results.download();
}

std::vector<Case> cases(int64_t vocab) {
  std::vector<Case> out;
  auto add = [&](std::string name, auto&& set) {
    Case c;
    c.name = std::move(name);
    set(c);
    out.push_back(std::move(c));
  };
  add("greedy", [](Case& c) { c.params.temperature = 0; });
  add("greedy+top5", [](Case& c) {
    c.params.temperature = 0, c.params.logprobs = true, c.params.top_logprobs = 5;
  });
  add("top_k=1", [](Case& c) { c.params.top_k = 1; });
  add("t=1", [](Case& c) { c.params.temperature = 1.0f; });
  add("t=0.7+logprobs", [](Case& c) { c.params.temperature = 0.7f, c.params.logprobs = true; });
  add("t=1.3+top20", [](Case& c) { c.params.temperature = 1.3f, c.params.top_logprobs = 20; });
  add("top_k=5", [](Case& c) { c.params.top_k = 5; });
  add("top_k=50+top_p=0.9", [](Case& c) { c.params.top_k = 50, c.params.top_p = 0.9f; });
  add("top_k=3000", [](Case& c) { c.params.top_k = 3000; });
  add("top_p=0.5", [](Case& c) { c.params.top_p = 0.5f; });
  add("top_p=0.95 t=0.8", [](Case& c) { c.params.top_p = 0.95f, c.params.temperature = 0.8f; });
  add("min_p=0.05", [](Case& c) { c.params.min_p = 0.05f; });
  add("min_p+top_k+top_p",
      [](Case& c) { c.params.min_p = 0.01f, c.params.top_k = 200, c.params.top_p = 0.8f; });
  add("sample_vocab", [&](Case& c) { c.sample_vocab = vocab - vocab / 7; });
  add("banned", [&](Case& c) { c.banned = {0, 3, static_cast<int32_t>(vocab - 1)}; });
  return out;
}

void run_rows(int64_t vocab, int rows_per_case, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  const std::vector<Case> cs = cases(vocab);
  std::vector<float> logits;
  std::vector<gpu::SampleParams> params;
  std::vector<const Case*> row_case;
  std::vector<double> us;
  const RowKind kinds[] = {RowKind::kNormal, RowKind::kPeaked, RowKind::kTies, RowKind::kBroken};
  for (const Case& c : cs)
    for (int r = 0; r < rows_per_case; ++r) {
      const RowKind kind = kinds[r % 4];
      const float sigma = r % 3 == 0 ? 0.5f : r % 3 == 1 ? 2.0f : 6.0f;
      const std::vector<float> row = make_row(rng, vocab, kind, sigma);
      logits.insert(logits.end(), row.begin(), row.end());
      const double u = ud(rng);
      params.push_back(device_params(c, vocab, u));
      row_case.push_back(&c);
      us.push_back(u);
    }
  const int64_t rows = static_cast<int64_t>(params.size());
  const std::vector<gpu::SampleResult> got = sample_on_device(logits, params, vocab);
  int mismatches = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const Case& c = *row_case[static_cast<size_t>(r)];
    const std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    int32_t want = -1;
    const TokenLogprob lp = host_sample(c, vocab, row, us[static_cast<size_t>(r)], &want);
    const gpu::SampleResult& g = got[static_cast<size_t>(r)];
    SCOPED_TRACE(c.name + " vocab " + std::to_string(vocab) + " row " + std::to_string(r));
    if (g.token != want) ++mismatches;
    EXPECT_EQ(g.token, want);
    if (c.params.logprobs || c.params.top_logprobs > 0) {
      EXPECT_NEAR(g.logprob, lp.logprob, 1e-4f * std::max(1.0f, std::fabs(lp.logprob)));
      ASSERT_EQ(g.num_top, static_cast<int32_t>(lp.top.size()));
      for (int t = 0; t < g.num_top; ++t) {
        EXPECT_EQ(g.top_id[t], lp.top[static_cast<size_t>(t)].first) << "top " << t;
        EXPECT_NEAR(g.top_logprob[t],
                    lp.top[static_cast<size_t>(t)].second,
                    1e-4f * std::max(1.0f, std::fabs(lp.top[static_cast<size_t>(t)].second)));
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

class GpuSampling : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(GpuSampling, SmallVocabMatchesHostSampler) {
  run_rows(37, 40, std::random_device{}());
}
TEST_F(GpuSampling, MidVocabMatchesHostSampler) {
  run_rows(5000, 12, std::random_device{}());
}
TEST_F(GpuSampling, FlashVocabMatchesHostSampler) {
  run_rows(129280, 4, std::random_device{}());
}

// Many draws over one small row: every uniform lands on the same token as the host's walk.
TEST_F(GpuSampling, EveryUniformWalksLikeTheHost) {
  const int64_t vocab = 16, rows = 4096;
  std::mt19937 rng(std::random_device{}());
  std::vector<float> row = make_row(rng, vocab, RowKind::kNormal, 1.0f);
  Case c;
  c.params.temperature = 0.9f;
  c.params.top_p = 0.97f;
  std::vector<float> logits;
  std::vector<gpu::SampleParams> params;
  for (int64_t r = 0; r < rows; ++r) {
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(
        device_params(c, vocab, (static_cast<double>(r) + 0.5) / static_cast<double>(rows)));
  }
  const std::vector<gpu::SampleResult> got = sample_on_device(logits, params, vocab);
  int distinct = 0, last = -1;
  for (int64_t r = 0; r < rows; ++r) {
    int32_t want = -1;
    host_sample(c, vocab, row, params[static_cast<size_t>(r)].u, &want);
    ASSERT_EQ(got[static_cast<size_t>(r)].token, want) << "u " << params[static_cast<size_t>(r)].u;
    if (want != last) ++distinct, last = want;
  }
  EXPECT_GT(distinct, 3);  // the sweep really crossed several tokens
}

// A row's token and logprobs do not depend on the batch it is sampled in (the kernel's cluster
// size does: 8 CTAs per row alone, 2 in a 100-row batch; every sum is exact).
TEST_F(GpuSampling, ResultDoesNotDependOnTheBatch) {
  const int64_t vocab = 129280, rows = 100;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  Case c;
  c.params.temperature = 0.8f;
  c.params.top_p = 0.9f;
  c.params.logprobs = true;
  c.params.top_logprobs = 5;
  std::vector<float> logits;
  std::vector<gpu::SampleParams> params;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row = make_row(rng, vocab, r % 2 ? RowKind::kNormal : RowKind::kTies, 2.0f);
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(device_params(c, vocab, ud(rng)));
  }
  const std::vector<gpu::SampleResult> batch = sample_on_device(logits, params, vocab);
  for (int64_t r = 0; r < 4; ++r) {
    const std::vector<float> one(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    const gpu::SampleResult alone = sample_on_device(one, {params[static_cast<size_t>(r)]}, vocab)[0];
    const gpu::SampleResult& b = batch[static_cast<size_t>(r)];
    EXPECT_EQ(alone.token, b.token) << "row " << r;
    EXPECT_EQ(alone.logprob, b.logprob) << "row " << r;
    ASSERT_EQ(alone.num_top, b.num_top);
    for (int t = 0; t < b.num_top; ++t) {
      EXPECT_EQ(alone.top_id[t], b.top_id[t]);
      EXPECT_EQ(alone.top_logprob[t], b.top_logprob[t]);
    }
  }
}

// Rows the host samples are left alone.
TEST_F(GpuSampling, HostRowsAreSkipped) {
  const int64_t vocab = 100;
  std::vector<float> logits(2 * vocab, 0.0f);
  logits[7] = 5.0f;
  std::vector<gpu::SampleParams> params(2);
  params[0].on_device = 1;
  params[0].sample_vocab = static_cast<int32_t>(vocab);
  params[1].on_device = 0;
  gpu::DeviceBuffer<float> d_logits;
  d_logits.upload(logits);
  gpu::DeviceBuffer<gpu::SampleParams> d_params;
  d_params.upload(params);
  std::vector<gpu::SampleResult> init(2);
  init[1].token = 1234;
  gpu::DeviceBuffer<gpu::SampleResult> d_results;
  d_results.upload(init);
  gpu::DeviceBuffer<float> scratch(logits.size());
  gpu::sample_rows(
      d_logits.get(), 2, vocab, d_params.get(), d_results.get(), scratch.get(), nullptr);
  const std::vector<gpu::SampleResult> got = d_results.download();
  EXPECT_EQ(got[0].token, 7);
  EXPECT_EQ(got[1].token, 1234);
}

// ---- Through the engine: GpuRunner with device sampling vs host sampling -------------------

std::filesystem::path golden_dir() {
  if (const char* env = std::getenv("DSV4_GOLDEN_DIR"); env != nullptr && *env != '\0') return env;
  if (std::filesystem::exists(DSV4_GOLDEN_DIR)) return DSV4_GOLDEN_DIR;
  return std::filesystem::path("tests") / "data" / "golden";
}

struct Outputs {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, std::vector<float>> logprobs;
  std::map<int, FinishReason> reason;
  OutputSink sink(int key) {
    return [this, key](OutputEvent&& ev) {
      std::lock_guard lock(mu);
      auto& t = tokens[key];
      t.insert(t.end(), ev.token_ids.begin(), ev.token_ids.end());
      for (const TokenLogprob& lp : ev.logprobs) logprobs[key].push_back(lp.logprob);
      if (ev.finished) reason[key] = ev.finish_reason, cv.notify_all();
    };
  }
};

// Eight seeded requests of different sampling families, all submitted before the engine starts.
std::map<int, std::vector<int32_t>> run_engine(const std::filesystem::path& dir,
                                               bool device_sampling,
                                               std::map<int, std::vector<float>>* logprobs) {
  auto model = gpu::GpuModel::load(dir, gpu::GpuModelOptions{.max_seq_len = 256});
  const int64_t vocab = model->config().vocab_size;
  auto runner = std::make_unique<GpuRunner>(
      std::move(model),
      GpuRunnerOptions{
          .max_running_requests = 8, .cuda_graph_max_bs = 8, .device_sampling = device_sampling});
  EngineConfig cfg;
  cfg.max_running_requests = 8;
  cfg.chunked_prefill_size = 64;
  cfg.eos_ids = {1};
  cfg.decode_log_interval = 0;
  cfg.log_prefill = false;
  Engine e(cfg, std::move(runner));
  Outputs out;
  for (int k = 0; k < 8; ++k) {
    GenerateInput in;
    for (int i = 0; i < 9 + 7 * k; ++i)
      in.prompt.push_back(static_cast<int32_t>((i * 37 + k * 11 + 2) % vocab));
    SamplingParams& p = in.params;
    p.seed = 100 + k;
    p.max_tokens = 12;
    p.min_tokens = k == 5 ? 12 : 0;  // EOS banned for the whole request
    p.ignore_eos = k != 5;
    switch (k) {
      case 0:
        p.temperature = 0;
        break;
      case 1:
        p.temperature = 0.8f, p.top_p = 0.95f;
        break;
      case 2:
        p.top_k = 20;
        break;
      case 3:
        p.min_p = 0.02f, p.temperature = 1.2f;
        break;
      case 4:
        p.logprobs = true, p.top_logprobs = 5, p.temperature = 0.9f;
        break;
      case 5:
        p.temperature = 1.0f;
        break;
      case 6:
        p.repetition_penalty = 1.3f;
        break;  // host-sampled even with device sampling on
      default:
        p.top_k = 50, p.top_p = 0.8f, p.temperature = 0.7f;
        break;
    }
    in.sink = out.sink(k);
    EXPECT_EQ(e.submit(std::move(in)).status, SubmitStatus::kOk);
  }
  e.start();
  {
    std::unique_lock lock(out.mu);
    EXPECT_TRUE(
        out.cv.wait_for(lock, std::chrono::seconds(120), [&] { return out.reason.size() == 8; }));
  }
  if (logprobs != nullptr) *logprobs = out.logprobs;
  return out.tokens;
}

TEST_F(GpuSampling, EngineTokensAreTheSameWithDeviceOrHostSampling) {
  const std::filesystem::path dir = golden_dir() / "tiny-calm";
  ASSERT_TRUE(std::filesystem::exists(dir / "config.json")) << dir;
  std::map<int, std::vector<float>> lp_dev, lp_host;
  const auto dev = run_engine(dir, true, &lp_dev);
  const auto host = run_engine(dir, false, &lp_host);
  ASSERT_EQ(dev.size(), 8u);
  for (const auto& [k, toks] : host) {
    EXPECT_EQ(toks.size(), 12u) << "request " << k;
    EXPECT_EQ(dev.at(k), toks) << "request " << k;
  }
  ASSERT_EQ(lp_dev[4].size(), lp_host[4].size());
  for (size_t i = 0; i < lp_host[4].size(); ++i) EXPECT_NEAR(lp_dev[4][i], lp_host[4][i], 1e-4f);
}

}  // namespace
}  // namespace dsv4::engine
