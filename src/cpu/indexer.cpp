#include "cpu/indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "base/parallel.h"
#include "cpu/compressor.h"
#include "numerics/formats.h"
#include "numerics/hadamard.h"
#include "numerics/quant.h"

namespace dsv4::cpu {

using numerics::round_bf16;

void index_scores(std::span<const float> q, std::span<const float> weights, LayerState& keys,
                  int64_t visible, const IndexerParams& p, std::span<float> scores) {
  const int dh = p.head_dim;
  for (int64_t w = 0; w < visible; ++w) {
    const float* key = keys.index_key(w);
    float total = 0.0f;
    for (int h = 0; h < p.num_heads; ++h) {
      const float* qh = q.data() + h * dh;
      double dot = 0.0;
      for (int k = 0; k < dh; ++k) dot += static_cast<double>(qh[k]) * key[k];
      const float s = std::max(round_bf16(static_cast<float>(dot)), 0.0f);
      total += round_bf16(s * weights[h]);
    }
    scores[w] = round_bf16(total);
  }
}

std::vector<int32_t> select_topk(std::span<const float> scores, int k) {
  std::vector<int32_t> ids(scores.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t take = std::min<size_t>(static_cast<size_t>(k), ids.size());
  auto better = [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(take), ids.end(), better);
  ids.resize(take);
  return ids;
}

std::vector<std::vector<int32_t>> indexer_select(const IndexerWeights& w, LayerState& layer,
                                                 std::span<const float> x,
                                                 std::span<const float> qr, int64_t n,
                                                 int64_t start_pos,
                                                 const numerics::RopeTable& rope,
                                                 const IndexerParams& p) {
  compress_tokens(w.compressor, layer, x, n, start_pos, rope, p.rope_dim, p.norm_eps,
                  CompressedKind::kIndexer);
  const int64_t d_model = w.weights_proj.in;
  const int64_t q_lora = w.wq_b.in;
  const int dh = p.head_dim;
  // ω scale: softmax_scale · n_heads^-0.5, a Python float applied to a bf16 tensor.
  const float weight_scale =
      static_cast<float>(std::pow(static_cast<double>(dh), -0.5) * std::pow(p.num_heads, -0.5));
  std::vector<std::vector<int32_t>> selected(static_cast<size_t>(n));
  parallel_for(n, [&](int64_t b, int64_t e) {
    std::vector<float> q(static_cast<size_t>(p.num_heads) * dh), weights(p.num_heads), scores;
    for (int64_t t = b; t < e; ++t) {
      const int64_t pos = start_pos + t;
      w.wq_b.forward(qr.subspan(t * q_lora, q_lora), q);
      for (int h = 0; h < p.num_heads; ++h) {
        auto qh = std::span(q).subspan(h * dh, dh);
        rope.apply(qh, pos);
        numerics::hadamard_bf16(qh);
        numerics::simulate_q4(qh, 32);
      }
      w.weights_proj.forward(x.subspan(t * d_model, d_model), weights);
      for (float& v : weights) v = round_bf16(v * weight_scale);
      const int64_t visible = (pos + 1) / p.ratio;
      scores.resize(static_cast<size_t>(visible));
      index_scores(q, weights, layer, visible, p, scores);
      selected[t] = select_topk(scores, p.topk);
    }
  });
  return selected;
}

}  // namespace dsv4::cpu
