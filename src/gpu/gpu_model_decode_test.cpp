// GpuModel::decode on the golden tiny checkpoints (and a dummy model wide enough for the grouped
// FP4 MoE) against per-sequence forward(), and CUDA-graph replay (with padding) against eager
// decode, bitwise. With the sm_90a decode attention (GpuModel::decode_attn_path() == kSm90:
// tensor-core attention and indexer, not bitwise) decode is checked against forward()
// statistically with the golden tier-B limits (rel p50 ≤ 0.35, p90 ≤ 1.3, argmax agreement
// ≥ 0.72: ulp-level differences flip indexer top-k sets and FP8/FP4 scales in these random tiny
// models, see tests/data/golden/README.md), while graph replay must still equal eager decode bit
// for bit. The decode kernels' own tests are in decode_test.cpp. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "eval/golden_manifest.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_test_util.h"
#include "gpu/kv_fp8.h"

namespace dsv4::gpu {
namespace {
namespace fs = std::filesystem;

fs::path golden_dir() { return eval::golden_root(DSV4_GOLDEN_DIR); }

// eval::row_rel_error: max |engine − ref| / sd(ref).
double row_rel(const float* got, const float* want, int64_t n) {
  double mean = 0, var = 0, worst = 0;
  for (int64_t i = 0; i < n; ++i) mean += want[i];
  mean /= double(n);
  for (int64_t i = 0; i < n; ++i) {
    var += (want[i] - mean) * (want[i] - mean);
    if (!std::isfinite(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  }
  return worst / std::sqrt(var / double(n - 1));
}

int64_t argmax(const float* v, int64_t n) { return std::max_element(v, v + n) - v; }

// Per-row agreement of decode with forward on the sm_90a path (tier-B statistics).
struct RelStats {
  std::vector<double> rel;
  int agree = 0;
  double quantile(double q) const {
    std::vector<double> v = rel;
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(std::max(0.0, std::ceil(q * double(v.size())) - 1))];
  }
};

// Prefills three copies of B sequences (prompt lengths `lens`), then per step compares
// per-sequence forward() (ref), eager decode() and graph decode() (graphs up to 8 captured).
// Bitwise against forward on the plain attention path; else rows collected into `stats`.
void expect_decode_matches_forward(GpuModel& m, const std::vector<int>& lens, int steps, RelStats* stats = nullptr) {
  const bool bitwise = m.decode_attn_path() == DecodeAttnPath::kPlain;
  const int64_t B = static_cast<int64_t>(lens.size()), V = m.config().vocab_size;
  m.enable_decode_graphs(8);
  std::vector<GpuSequenceState> ref, eag, gra;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> prompt(static_cast<size_t>(lens[b]));
    for (int i = 0; i < lens[b]; ++i) prompt[i] = static_cast<int32_t>((i * 37 + b * 11 + 3) % V);
    for (auto* set : {&ref, &eag, &gra}) {
      set->push_back(m.new_sequence());
      m.forward(set->back(), prompt, false, lens[b], false);
    }
  }
  std::vector<GpuSequenceState*> eag_p, gra_p;
  for (int64_t b = 0; b < B; ++b) {
    eag_p.push_back(&eag[b]);
    gra_p.push_back(&gra[b]);
  }
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> toks(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) toks[b] = static_cast<int32_t>((s * 101 + b * 7 + 5) % V);
    std::vector<float> want(static_cast<size_t>(B * V)), eager(want.size()), graph(want.size());
    for (int64_t b = 0; b < B; ++b) {
      const auto out = m.forward(ref[b], std::span(&toks[b], 1), false, 0, false);
      std::copy(out.logits.begin(), out.logits.end(), want.begin() + b * V);
    }
    m.decode(eag_p, toks, eager, GpuModel::DecodeMode::kEager);
    m.decode(gra_p, toks, graph, GpuModel::DecodeMode::kAuto);
    // Non-trivial logits: finite, not all equal.
    bool finite = true, varied = false;
    for (float v : want) finite = finite && std::isfinite(v);
    for (int64_t i = 1; i < V; ++i) varied = varied || want[i] != want[0];
    EXPECT_TRUE(finite && varied) << "step " << s;
    for (int64_t b = 0; b < B; ++b) {
      if (bitwise) {
        EXPECT_EQ(0, std::memcmp(eager.data() + b * V, want.data() + b * V, V * sizeof(float)))
            << "eager decode vs forward: B=" << B << " step " << s << " row " << b << " (prompt " << lens[b] << ")";
      } else if (stats != nullptr) {
        stats->rel.push_back(row_rel(eager.data() + b * V, want.data() + b * V, V));
        stats->agree += argmax(eager.data() + b * V, V) == argmax(want.data() + b * V, V);
      }
      EXPECT_EQ(0, std::memcmp(graph.data() + b * V, eager.data() + b * V, V * sizeof(float)))
          << "graph decode vs eager: B=" << B << " step " << s << " row " << b;
    }
  }
  EXPECT_GE(m.decode_graphs_captured(), 1);
  // The sequences' device state after the steps, too: windows, compressor states and the
  // written entries (the rest of an entry buffer is uninitialized memory), byte for byte.
  const auto& cfg = m.config();
  auto prefix = [](const auto& buf, int64_t count) {
    auto v = buf.download();
    v.resize(static_cast<size_t>(count));
    return v;
  };
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_EQ(eag[b].length, ref[b].length);
    EXPECT_EQ(gra[b].length, ref[b].length);
    for (int l = 0; l < cfg.num_layers(); ++l) {
      // Plain path: everything equals forward()'s state. sm90: later layers' inputs differ from
      // forward()'s, so the graph's state must equal eager decode's instead.
      const GpuLayerCache &r = bitwise ? ref[b].layers[l] : eag[b].layers[l], &e = eag[b].layers[l],
                          &g = gra[b].layers[l];
      const std::string at = " b" + std::to_string(b) + " l" + std::to_string(l);
      EXPECT_TRUE(same_bits(e.window.download(), r.window.download())) << "window" << at;
      EXPECT_TRUE(same_bits(g.window.download(), r.window.download())) << "window" << at;
      const int ratio = cfg.compress_ratio(l);
      if (ratio == 0) continue;
      const int64_t entries = ref[b].length / ratio;
      EXPECT_TRUE(same_bits(fp8_entries(e.compressed, entries), fp8_entries(r.compressed, entries))) << "compressed" << at;
      EXPECT_TRUE(same_bits(fp8_entries(g.compressed, entries), fp8_entries(r.compressed, entries))) << "compressed" << at;
      EXPECT_TRUE(same_bits(e.comp_kv.download(), r.comp_kv.download())) << "comp_kv" << at;
      EXPECT_TRUE(same_bits(g.comp_score.download(), r.comp_score.download())) << "comp_score" << at;
      if (!r.index_keys.empty()) {
        const int64_t ni = entries * cfg.index_head_dim;
        EXPECT_TRUE(same_bits(prefix(e.index_keys, ni), prefix(r.index_keys, ni))) << "index_keys" << at;
        EXPECT_TRUE(same_bits(prefix(g.index_keys, ni), prefix(r.index_keys, ni))) << "index_keys" << at;
        EXPECT_TRUE(same_bits(g.index_kv.download(), r.index_kv.download())) << "index_kv" << at;
      }
    }
  }
}

// Prompt lengths per batch size: entries emitted or not during the steps, positions inside
// and past the 128-token window, a ratio-128 boundary (127, 255) crossed.
std::vector<int> lens_for(int B) {
  const std::vector<int> all = {126, 1, 5, 30, 127, 130, 200, 252};
  return std::vector<int>(all.begin(), all.begin() + B);
}

class DecodeGoldenModel : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeGoldenModel, DecodeEqualsForwardAndGraphEqualsEager) {
  SKIP_WITHOUT_GPU();
  const fs::path dir = golden_dir() / GetParam();
  ASSERT_TRUE(fs::exists(dir / "config.json")) << dir;
  auto m = GpuModel::load(dir, GpuModelOptions{.max_seq_len = 512, .plain_decode_attention = true});
  ASSERT_EQ(m->decode_attn_path(), DecodeAttnPath::kPlain);
  for (int B : {1, 3, 8}) expect_decode_matches_forward(*m, lens_for(B), 6);
}

// The model's own decode attention path (sm_90a on H200): tier-B statistics against forward(),
// graph replay bitwise against eager decode.
TEST_P(DecodeGoldenModel, Sm90DecodeAgreesWithForwardAndGraphEqualsEager) {
  SKIP_WITHOUT_GPU();
  const fs::path dir = golden_dir() / GetParam();
  ASSERT_TRUE(fs::exists(dir / "config.json")) << dir;
  auto m = GpuModel::load(dir, GpuModelOptions{.max_seq_len = 512});
  if (m->decode_attn_path() == DecodeAttnPath::kPlain) GTEST_SKIP() << "no sm_90 decode attention on this device";
  RelStats st;
  for (int B : {1, 3, 8}) expect_decode_matches_forward(*m, lens_for(B), 6, &st);
  const double p50 = st.quantile(0.5), p90 = st.quantile(0.9), agree = double(st.agree) / double(st.rel.size());
  std::printf("[sm90 decode vs forward] %s: %zu rows, rel p50 %.4g p90 %.4g max %.4g, argmax agreement %.3f\n",
              GetParam().c_str(), st.rel.size(), p50, p90, st.quantile(1.0), agree);
  EXPECT_LE(p50, 0.35);
  EXPECT_LE(p90, 1.3);
  EXPECT_GE(agree, 0.72);
}

INSTANTIATE_TEST_SUITE_P(Golden, DecodeGoldenModel, ::testing::Values("tiny-c4", "tiny-calm", "tiny-c4-w16"));

// Hidden and expert widths of 256 so the grouped FP4 MoE (sm90) runs: its rows must not
// depend on the batch either.
TEST(DecodeDummyModel, GroupedMoeDecodeEqualsForward) {
  SKIP_WITHOUT_GPU();
  auto cfg = model::ModelConfig::from_file(golden_dir() / "tiny-c4" / "config.json");
  cfg.hidden_size = 256;
  cfg.moe_intermediate_size = 256;
  auto m = GpuModel::dummy(cfg, 77, GpuModelOptions{.max_seq_len = 512, .plain_decode_attention = true});
  expect_decode_matches_forward(*m, lens_for(8), 5);
  expect_decode_matches_forward(*m, lens_for(3), 3);
}

}  // namespace
}  // namespace dsv4::gpu
