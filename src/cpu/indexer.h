// Lightning indexer on the CPU (spec §4.6): picks the compressed entries a CSA query reads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpu/sequence_state.h"
#include "cpu/weights.h"
#include "numerics/rope.h"

namespace dsv4::cpu {

struct IndexerParams {
  int num_heads = 64;
  int head_dim = 128;
  int rope_dim = 64;
  int topk = 512;
  int ratio = 4;
  float norm_eps = 1e-6f;
};

// Bf16 index scores of query token t against entries [0, visible): score(w) =
// bf16(Σ_h bf16(ω_h · relu(bf16(q_h·K_w)))). q: [num_heads, head_dim] (rotated, FP4-simulated),
// weights: [num_heads] (bf16, pre-scaled).
void index_scores(std::span<const float> q, std::span<const float> weights, LayerState& keys,
                  int64_t visible, const IndexerParams& p, std::span<float> scores);

// Top-k entry ids by descending score, exact ties broken by the lower id (torch.topk's CUDA
// order). Returns min(k, scores.size()) ids.
std::vector<int32_t> select_topk(std::span<const float> scores, int k);

// Updates the indexer's compressor with the call's tokens (x: [n, D]) and returns, for each
// query token (positions start_pos + t), the selected entry ids among w < (pos+1)/ratio.
// qr: [n, q_lora_rank] normalized q-LoRA vectors.
std::vector<std::vector<int32_t>> indexer_select(const IndexerWeights& w, LayerState& layer,
                                                 std::span<const float> x,
                                                 std::span<const float> qr, int64_t n,
                                                 int64_t start_pos,
                                                 const numerics::RopeTable& rope,
                                                 const IndexerParams& p);

}  // namespace dsv4::cpu
