// Tensor parallelism over two GPUs (NCCL) against one GPU on the same checkpoint.
//
// The golden tiny sets cannot be split faithfully (their 64-wide expert / wo_b halves would
// cut the 128-wide activation quantization blocks), so this test writes a random checkpoint
// (make_tiny, seeded) whose every split keeps the blocks whole: 4 heads in 2 output groups,
// o_lora_rank 128, expert width 256, and the three layer kinds (window, CSA with indexer,
// HCA) plus a hash layer and the MTP block. TP2 differs from TP1 only where partial sums
// are added (fp32 all-reduce, one bf16 rounding: per-expert rounding is not reproduced), so
// logits agree closely but not bitwise. Like the golden tiny-c4 set this model has near-tie
// routing and clamping experts, so one-ulp differences flip expert choices on some rows and
// the runs drift apart there (as two correct implementations do, golden README; measured on
// the H200: trunk rows rel p50 0.12, argmax 39/42). The tight check is therefore the MTP block
// — one split attention + split MoE layer — fed the SAME input streams on both (measured rel
// 4e-4 .. 8e-3); the trunk is checked statistically. A wrong slice or a missing reduction
// gives rel ≈ 1 on every row. Skips without two GPUs or without NCCL.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "eval/gates.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_weights.h"
#include "model/make_tiny.h"
#include "model/model_config.h"

namespace dsv4::gpu {
namespace {

model::ModelConfig tp_friendly_config() {
  auto cfg = model::ModelConfig::from_file(std::string(DSV4_GOLDEN_DIR) + "/tiny-c4/config.json");
  cfg.num_attention_heads = 4;
  cfg.o_groups = 2;
  cfg.o_lora_rank = 128;
  cfg.moe_intermediate_size = 256;
  cfg.validate();
  return cfg;
}

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  return eval::row_rel_error(a.data(), b.data(), static_cast<int64_t>(a.size()));
}

int argmax(const std::vector<float>& v) {
  return static_cast<int>(eval::first_argmax(v.data(), static_cast<int64_t>(v.size())));
}

// Dummy weights (the Flash benchmarks' model) must be one model split over the ranks: the
// replicated tensors (router gate, mHC, norms, indexer, compressor, embeddings) equal on every
// rank, so the ranks route and index alike; the split parts differ. One GPU suffices: both
// ranks' weights are generated on it.
TEST(GpuTensorParallel, DummyWeightsReplicateWhatIsNotSplit) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const auto cfg = tp_friendly_config();
  const auto r0 = dummy_weights(cfg, 5, 0, 2);
  const auto r1 = dummy_weights(cfg, 5, 1, 2);
  ASSERT_EQ(r0->layers.size(), r1->layers.size());
  for (size_t l = 0; l < r0->layers.size(); ++l) {
    const BlockW& a = r0->layers[l];
    const BlockW& b = r1->layers[l];
    EXPECT_EQ(a.ffn.gate.w.download(), b.ffn.gate.w.download()) << "layer " << l << " gate";
    EXPECT_EQ(a.hc_attn.fn.w.download(), b.hc_attn.fn.w.download()) << "layer " << l << " hc_attn fn";
    EXPECT_EQ(a.attn_norm.download(), b.attn_norm.download()) << "layer " << l << " attn_norm";
    EXPECT_EQ(a.attn.wq_a.w.download(), b.attn.wq_a.w.download()) << "layer " << l << " wq_a";
    EXPECT_NE(a.attn.wq_b.w.download(), b.attn.wq_b.w.download()) << "layer " << l << " wq_b (split by heads)";
    EXPECT_NE(a.ffn.experts.w1.download(), b.ffn.experts.w1.download()) << "layer " << l << " experts (split)";
    if (a.attn.indexer) {
      EXPECT_EQ(a.attn.indexer->wq_b.w.download(), b.attn.indexer->wq_b.w.download()) << "layer " << l;
    }
  }
  EXPECT_EQ(r0->embed.download(), r1->embed.download());
  EXPECT_EQ(r0->head.w.download(), r1->head.w.download());
}

TEST(GpuTensorParallel, Tp2MatchesTp1OnPrefillDecodeAndMtp) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) GTEST_SKIP() << "tensor parallelism needs 2 GPUs, found " << devices;
  if (!tp_supported()) GTEST_SKIP() << "built without NCCL";

  const auto cfg = tp_friendly_config();
  const auto ckpt = checkpoint::Checkpoint::from_buffer(model::make_tiny_checkpoint_bytes(cfg, 77), "tp-test");
  auto tp1 = GpuModel::from_checkpoint(cfg, ckpt, GpuModelOptions{.max_seq_len = 512});
  auto tp2 = GpuModel::from_checkpoint(cfg, ckpt, GpuModelOptions{.max_seq_len = 512, .tp_size = 2});
  ASSERT_EQ(tp2->tp_size(), 2);

  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  std::vector<double> rels;
  double mtp_worst = 0;
  int argmax_same = 0, rows = 0;
  for (const int prompt_len : {1, 37, 300}) {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (auto& t : prompt) t = tok(rng);
    auto s1 = tp1->new_sequence();
    auto s2 = tp2->new_sequence();
    ASSERT_EQ(s2.peers.size(), 1u);
    auto o1 = tp1->forward(s1, prompt, false, 0, true);
    auto o2 = tp2->forward(s2, prompt, false, 0, true);
    rels.push_back(rel_error(o2.logits, o1.logits));
    argmax_same += argmax(o1.logits) == argmax(o2.logits);
    ++rows;
    // MTP over the prefill positions (next ids = the prompt shifted by one).
    std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
    next.push_back(argmax(o1.logits));
    const auto m1 = tp1->mtp_forward(s1, o1.final_streams, next, 0);
    const auto m2 = tp2->mtp_forward(s2, o1.final_streams, next, 0);
    mtp_worst = std::max(mtp_worst, rel_error(m2, m1));
    ++rows;
    argmax_same += argmax(m1) == argmax(m2);
    // Greedy decode, both fed the TP1 choice so the positions stay aligned.
    int32_t t = argmax(o1.logits);
    for (int step = 0; step < 12; ++step) {
      const std::vector<int32_t> one{t};
      o1 = tp1->forward(s1, one, false, 0, false);
      o2 = tp2->forward(s2, one, false, 0, false);
      rels.push_back(rel_error(o2.logits, o1.logits));
      argmax_same += argmax(o1.logits) == argmax(o2.logits);
      ++rows;
      t = argmax(o1.logits);
    }
    EXPECT_EQ(s2.length, s1.length);
    EXPECT_EQ(s2.peers[0].length, s1.length);
  }
  const double worst = *std::max_element(rels.begin(), rels.end());
  const double mean = std::accumulate(rels.begin(), rels.end(), 0.0) / rels.size();
  std::vector<double> sorted = rels;
  std::sort(sorted.begin(), sorted.end());
  std::printf("[tp2 vs tp1] MTP block on identical inputs: worst rel %.3g; trunk %zu rows: rel mean %.4g, p50 %.4g, "
              "max %.4g; argmax agreement %d/%d\n",
              mtp_worst, rels.size(), mean, sorted[sorted.size() / 2], worst, argmax_same, rows);
  std::printf("[tp2 vs tp1] rows:");
  for (double r : rels) std::printf(" %.3g", r);
  std::printf("\n");
  EXPECT_LE(mtp_worst, 2e-2);
  EXPECT_LE(mean, 0.3);
  // The trunk of a random tiny model is chaotic (TP2's other summation split grows to ~12% rel
  // over the layers) and its logits are near-tied, so argmax agreement is a noisy gate: 35, 35
  // and 34 of 42 rows in three builds with the same rel distribution (mean 0.123 / 0.130 /
  // 0.125, H200, 2026-11-30). The precise TP check is the MTP block on identical inputs above.
  EXPECT_GE(argmax_same, rows * 80 / 100);
}

TEST(GpuTensorParallel, SplitThatCutsAQuantizationBlockIsRefusedByName) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2 || !tp_supported()) GTEST_SKIP() << "needs 2 GPUs and NCCL";
  // tiny-c4: expert width 128 and o_groups·o_lora_rank 128 → 64-wide halves.
  try {
    GpuModel::load(std::string(DSV4_GOLDEN_DIR) + "/tiny-c4", GpuModelOptions{.tp_size = 2});
    FAIL() << "a split into 64-wide halves was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("moe_intermediate_size"), std::string::npos) << msg;
    EXPECT_NE(msg.find("multiples of 128"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace dsv4::gpu
