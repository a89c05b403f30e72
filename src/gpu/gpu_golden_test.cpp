// The GPU backend's acceptance test: every golden set must pass every gate of its manifest,
// and the GPU must agree with the CPU reference within tolerances. The GPU linears are
// tolerance-equal to the CPU (tensor-core fp32 block sums, docs/decode-linears.md), and the tiny
// random models amplify a last-bit difference over a long sequence (top-k flips, chaotic
// streams), so GPU vs CPU is bounded like a golden tier: case 0 row 0 rel ≤ 1e-3 (one token:
// no amplification yet), rel p50 ≤ 0.1 and p90 ≤ 0.35 over every logits / MTP row (measured on
// H200: p50 ≤ 0.047, p90 ≤ 0.23; GPU vs golden is p50 0.09–0.15 either way). Worst row and
// case 0's stream difference are printed. The forward (prefill) path runs twice: on the plain
// attention kernels (the bounds above) and on the model's own (sm_90a tensor-core indexer and
// attention on H200: every golden gate, GPU vs CPU bounded as the golden tier B, see below).
// A second test runs every case through batched decode (the first token prefilled, then
// GpuModel::decode() one position at a time, a CUDA graph replayed) and applies the manifest's
// logits gates to it: the decode attention path (sm_90a tensor-core attention + indexer on
// H200) meets the same tiers as the forward path. MTP and x_layers gates are skipped there
// (decode returns logits only).
// Skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cpu/model.h"
#include "base/check.h"
#include "eval/cpu_golden_backend.h"
#include "eval/gates.h"
#include "eval/logits_runner.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_golden_backend.h"

namespace dsv4::gpu {
namespace fs = std::filesystem;

class GpuGoldenSet : public ::testing::TestWithParam<std::string> {};

// Runs every case on `model` and checks every gate of the manifest; returns the outputs.
eval::OutputTensors run_gpu_gates(const std::shared_ptr<GpuModel>& model, const fs::path& dir,
                                  const eval::GoldenManifest& manifest, const std::string& tag) {
  const auto t0 = std::chrono::steady_clock::now();
  GpuGoldenBackend gpu(model);
  auto out = eval::run_golden_cases(gpu, manifest, true, true);
  const double gpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const fs::path gpu_path = fs::temp_directory_path() / ("dsv4_gpu_" + tag + ".safetensors");
  eval::write_output_tensors(out, gpu_path.string());
  const auto report = eval::evaluate_gates(manifest, dir / "golden.safetensors", gpu_path);
  std::printf("[gpu vs golden] %s (GPU run %.1f s)\n%s", tag.c_str(), gpu_s, report.to_string().c_str());
  for (const auto& g : report.gates) EXPECT_TRUE(g.passed) << "gpu vs golden " << g.gate.name << ": " << g.detail;
  fs::remove(gpu_path);
  return out;
}

TEST_P(GpuGoldenSet, GpuPassesEveryGateAndAgreesWithCpu) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = eval::golden_root(DSV4_GOLDEN_DIR) / GetParam();
  const auto manifest = eval::load_manifest(dir / "manifest.json");
  // The forward path on the plain attention kernels (ops.h) and on the model's own (sm_90a
  // tensor-core indexer + attention on H200): both must pass every golden gate.
  std::shared_ptr<GpuModel> plain = GpuModel::load(dir, GpuModelOptions{.plain_decode_attention = true});
  ASSERT_EQ(plain->decode_attn_path(), DecodeAttnPath::kPlain);
  const auto plain_out = run_gpu_gates(plain, dir, manifest, GetParam() + " plain attention");
  plain.reset();
  std::shared_ptr<GpuModel> own = GpuModel::load(dir);
  const bool sm90 = own->decode_attn_path() != DecodeAttnPath::kPlain;
  const auto own_out = sm90 ? run_gpu_gates(own, dir, manifest, GetParam() + " sm90 attention") : eval::OutputTensors{};
  own.reset();

  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const cpu::CpuModel> cpu_model = cpu::CpuModel::load(dir);
  eval::CpuGoldenBackend cpu(cpu_model);
  const auto cpu_out = eval::run_golden_cases(cpu, manifest, true, true);
  const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // GPU vs CPU. Plain attention (the CPU's arithmetic except the linears' block sums): every
  // logits / MTP row's rel p50 ≤ 0.1, p90 ≤ 0.35, case 0 row 0 ≤ 1e-3; on the calm set also
  // every row ≤ 0.55 (its tier A limit: the GPU agrees with the CPU at least as tightly as the
  // calm tier demands of any implementation). The c4 sets have near-tie routing where a
  // last-bit difference flips experts (golden README), so there the worst row and the x_layers
  // streams of case 0's prefill (max |dX| / rms) are reported only. The sm_90a attention is
  // tolerance-equal (tensor-core sums regroup the softmax; indexer top-k sets flip on near
  // ties), which these random tiny models amplify as much as the golden sets' own spread
  // (measured on H200: p50 0.15 calm, 0.31 c4, 0.19 c4-w16, as the sm90 decode path vs
  // golden), so it is held to case 0 row 0 ≤ 1e-3, p50 ≤ 0.35 (the golden tier B limit) and
  // the calm set's every-row 0.55; its p90 is reported.
  auto agree = [&](const eval::OutputTensors& gpu_out, bool tight) {
    double worst = 0, worst_first = 0, worst_stream = 0;
    std::vector<double> rels;
    for (const auto& [name, g] : gpu_out) {
      const auto it = cpu_out.find(name);
      ASSERT_TRUE(it != cpu_out.end()) << name;
      const auto& c = it->second;
      ASSERT_EQ(g.values.size(), c.values.size()) << name;
      const int64_t cols = g.shape.back(), rows = static_cast<int64_t>(g.values.size()) / cols;
      if (name.find("x_layers") != std::string::npos) {
        if (name.rfind("case0.", 0) != 0) continue;
        double ss = 0, dmax = 0;
        for (size_t i = 0; i < c.values.size(); ++i) {
          ss += double(c.values[i]) * c.values[i];
          dmax = std::max(dmax, std::fabs(double(g.values[i]) - c.values[i]));
        }
        worst_stream = std::max(worst_stream, dmax / std::sqrt(ss / c.values.size()));
        continue;
      }
      for (int64_t r = 0; r < rows; ++r) {
        const double rel = eval::row_rel_error(&g.values[r * cols], &c.values[r * cols], cols);
        rels.push_back(rel);
        worst = std::max(worst, rel);
        if (r == 0 && name.rfind("case0.", 0) == 0) worst_first = std::max(worst_first, rel);
      }
    }
    std::printf("[gpu (%s attention) vs cpu] %s (CPU run %.1f s): %zu rows, rel max %.4g, p50 %.4g, p90 %.4g; "
                "case 0 row 0 %.3g; case 0 streams max|dX|/rms %.3g\n",
                tight ? "plain" : "sm90", GetParam().c_str(), cpu_s, rels.size(), worst, eval::quantile(rels, 0.5),
                eval::quantile(rels, 0.9), worst_first, worst_stream);
    EXPECT_LE(worst_first, 1e-3);
    EXPECT_LE(eval::quantile(rels, 0.5), tight ? 0.1 : 0.35);
    if (tight) EXPECT_LE(eval::quantile(rels, 0.9), 0.35);
    if (GetParam() == "tiny-calm") EXPECT_LE(worst, 0.55);
  };
  agree(plain_out, true);
  if (sm90) agree(own_out, false);
}

// GoldenBackend on the decode path: the first token of a sequence by forward(), every later
// token by decode() (B = 1, graph replay).
class DecodePathBackend : public eval::GoldenBackend {
 public:
  explicit DecodePathBackend(std::shared_ptr<GpuModel> m) : model_(std::move(m)) { reset(); }
  const model::ModelConfig& config() const override { return model_->config(); }
  std::string name() const override { return "cuda-decode"; }
  void reset() override { state_ = model_->new_sequence(); }
  std::vector<float> forward(std::span<const int32_t> tokens, std::vector<float>* layer_streams) override {
    DSV4_CHECK(layer_streams == nullptr, "the decode path has no layer streams");
    std::vector<float> logits;
    size_t i = 0;
    if (state_.length == 0) {
      logits = model_->forward(state_, tokens.first(1), false, 0, false).logits;
      i = 1;
    }
    logits.resize(static_cast<size_t>(model_->config().vocab_size));
    GpuSequenceState* seq = &state_;
    for (; i < tokens.size(); ++i) model_->decode(std::span(&seq, 1), tokens.subspan(i, 1), logits);
    return logits;
  }
  std::vector<float> mtp(std::span<const int32_t>) override { DSV4_FAIL("the decode path has no MTP"); }

 private:
  std::shared_ptr<GpuModel> model_;
  GpuSequenceState state_;
};

TEST_P(GpuGoldenSet, DecodePathPassesEveryLogitsGate) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = eval::golden_root(DSV4_GOLDEN_DIR) / GetParam();
  const auto manifest = eval::load_manifest(dir / "manifest.json");
  std::shared_ptr<GpuModel> model = GpuModel::load(dir);
  model->enable_decode_graphs(1);
  DecodePathBackend backend(model);
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = eval::run_golden_cases(backend, manifest, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const fs::path path = fs::temp_directory_path() / ("dsv4_gpu_decode_" + GetParam() + ".safetensors");
  eval::write_output_tensors(out, path.string());
  const auto report = eval::evaluate_gates(manifest, dir / "golden.safetensors", path);
  std::printf("[gpu decode path (%s attention) vs golden] %s (run %.1f s)\n%s",
              decode_attn_path_name(model->decode_attn_path()), GetParam().c_str(), s, report.to_string().c_str());
  int logits_gates = 0;
  for (const auto& g : report.gates) {
    if (g.gate.tensor == "logits" && g.gate.kind != "stream_per_layer") {
      ++logits_gates;
      EXPECT_TRUE(g.passed) << "decode path vs golden " << g.gate.name << ": " << g.detail;
    } else {
      EXPECT_TRUE(g.passed || g.skipped) << "decode path vs golden " << g.gate.name << ": " << g.detail;
    }
  }
  EXPECT_GE(logits_gates, 1);
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(AllSets, GpuGoldenSet, ::testing::Values("tiny-calm", "tiny-c4", "tiny-c4-w16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace dsv4::gpu
