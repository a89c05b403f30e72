#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "base/parallel.h"
#include "cpu/compressor.h"
#include "cpu/indexer.h"
#include "cpu/linear.h"
#include "numerics/formats.h"
#include "numerics/quant.h"

namespace dsv4::cpu {

using numerics::round_bf16;

void sparse_attention_head(std::span<const float> q, std::span<const float* const> candidates,
                           float sink, float softmax_scale, std::span<float> out) {
  constexpr int kBlock = 64;
  const size_t d = q.size();
  thread_local std::vector<double> acc;
  thread_local std::vector<double> block_pv;
  acc.assign(d, 0.0);
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  float s[kBlock];
  for (size_t b0 = 0; b0 < candidates.size(); b0 += kBlock) {
    const size_t count = std::min<size_t>(kBlock, candidates.size() - b0);
    float block_max = -std::numeric_limits<float>::infinity();
    for (size_t j = 0; j < count; ++j) {
      const float* kv = candidates[b0 + j];
      if (kv == nullptr) {
        s[j] = -std::numeric_limits<float>::infinity();
        continue;
      }
      double dot = 0.0;
      for (size_t k = 0; k < d; ++k) dot += static_cast<double>(q[k]) * kv[k];
      s[j] = static_cast<float>(dot) * softmax_scale;
      block_max = std::max(block_max, s[j]);
    }
    const float m_new = std::max(m, block_max);
    if (m_new == -std::numeric_limits<float>::infinity()) continue;  // nothing valid yet
    const float alpha = std::exp(m - m_new);  // 0 when m = −inf
    float p_sum = 0.0f;
    block_pv.assign(d, 0.0);
    for (size_t j = 0; j < count; ++j) {
      const float* kv = candidates[b0 + j];
      if (kv == nullptr) continue;
      const float p = std::exp(s[j] - m_new);
      p_sum += p;
      const double pb = round_bf16(p);
      for (size_t k = 0; k < d; ++k) block_pv[k] += pb * kv[k];
    }
    l = std::fma(l, alpha, p_sum);
    for (size_t k = 0; k < d; ++k)
      acc[k] = static_cast<float>(acc[k]) * alpha + static_cast<float>(block_pv[k]);
    m = m_new;
  }
  const float denom = l + std::exp(sink - m);
  for (size_t k = 0; k < d; ++k) out[k] = round_bf16(static_cast<float>(acc[k]) / denom);
}

namespace {

// Weightless per-head RMS normalization done with bf16 tensor ops, as the reference does:
// every intermediate (square, mean, +eps, rsqrt, product) is rounded to bf16.
void head_rms_bf16(std::span<float> q, float eps) {
  float sum = 0.0f;
  for (float v : q) sum += round_bf16(v * v);
  const float mean = round_bf16(sum / static_cast<float>(q.size()));
  const float r = round_bf16(1.0f / std::sqrt(round_bf16(mean + eps)));
  for (float& v : q) v = round_bf16(v * r);
}

}  // namespace

int64_t window_part_length(int64_t start_pos, int64_t n, int64_t prompt_length, int window) {
  if (prompt_length > 0 && start_pos + n <= prompt_length) return std::min<int64_t>(prompt_length, window);
  if (start_pos == 0) return std::min<int64_t>(n, window);
  return window;
}

void attention_forward(const AttentionWeights& w, const AttentionParams& p,
                       const numerics::RopeTable& rope, LayerState& cache,
                       std::span<const float> x, int64_t n, int64_t start_pos,
                       int64_t window_len, std::span<float> out) {
  const int H = p.num_heads, d = p.head_dim, rd = p.rope_dim, win = p.window;
  const int64_t D = w.wq_a.in, q_lora = w.wq_a.out;
  std::vector<float> qr(n * q_lora), q(n * H * d), kv(n * d);

  // 1. Query and window-KV paths, independent per token.
  parallel_for(n, [&](int64_t b, int64_t e) {
    std::vector<float> tmp_q(q_lora), tmp_kv(d);
    for (int64_t t = b; t < e; ++t) {
      const int64_t pos = start_pos + t;
      auto xt = x.subspan(t * D, D);
      w.wq_a.forward(xt, tmp_q);
      rms_norm(tmp_q, w.q_norm, p.norm_eps, std::span(qr).subspan(t * q_lora, q_lora));
      auto qt = std::span(q).subspan(t * H * d, H * d);
      w.wq_b.forward(std::span(qr).subspan(t * q_lora, q_lora), qt);
      for (int h = 0; h < H; ++h) {
        head_rms_bf16(qt.subspan(h * d, d), p.norm_eps);
        rope.apply(qt.subspan(h * d, d), pos);
      }
      w.wkv.forward(xt, tmp_kv);
      auto kvt = std::span(kv).subspan(t * d, d);
      rms_norm(tmp_kv, w.kv_norm, p.norm_eps, kvt);
      rope.apply(kvt, pos);
      numerics::simulate_q8(kvt.first(d - rd), 64);
    }
  });

  // 2. Compressed entries and the indexer's choices.
  std::vector<std::vector<int32_t>> selected;
  if (p.ratio > 0) {
    if (w.indexer) {
      IndexerParams ip{.num_heads = p.index_heads, .head_dim = p.index_head_dim, .rope_dim = rd,
                       .topk = p.index_topk, .ratio = p.ratio, .norm_eps = p.norm_eps};
      selected = indexer_select(*w.indexer, cache, x, qr, n, start_pos, rope, ip);
    }
    compress_tokens(*w.compressor, cache, x, n, start_pos, rope, rd, p.norm_eps,
                    CompressedKind::kAttention);
  }

  // 3. Sparse attention per (token, head). Candidate lists follow the reference layout:
  //    window part (length min(n, win) for a call at position 0, else win; chronological,
  //    −1 padded), then compressed entries (indexer order for CSA, ascending for HCA).
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<float> attn(n * H * d);
  DSV4_CHECK(window_len >= std::min<int64_t>(start_pos + n, win) && window_len <= win,
             "window part length ", window_len, " cannot hold the window of position ",
             start_pos + n - 1);
  parallel_for(n * H, [&](int64_t b, int64_t e) {
    std::vector<const float*> cand;
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / H;
      const int h = static_cast<int>(item % H);
      const int64_t pos = start_pos + t;
      cand.assign(static_cast<size_t>(window_len), nullptr);
      const int64_t first = std::max<int64_t>(0, pos - win + 1);
      for (int64_t src = first; src <= pos; ++src) {
        cand[src - first] = src >= start_pos ? &kv[(src - start_pos) * d]
                                             : cache.window_slot(src % win);
      }
      if (p.ratio > 0) {
        if (w.indexer) {
          for (int32_t id : selected[t]) cand.push_back(cache.compressed_entry(id));
        } else {
          const int64_t visible = (pos + 1) / p.ratio;
          for (int64_t id = 0; id < visible; ++id) cand.push_back(cache.compressed_entry(id));
        }
      }
      sparse_attention_head(std::span(q).subspan(item * d, d), cand, w.attn_sink[h], scale,
                            std::span(attn).subspan(item * d, d));
    }
  });

  // 4. The window ring keeps the last `win` positions (slot = position mod win).
  for (int64_t t = std::max<int64_t>(0, n - win); t < n; ++t) {
    const int64_t pos = start_pos + t;
    std::copy_n(&kv[t * d], d, cache.window_slot(pos % win));
  }

  // 5. Inverse RoPE, grouped wo_a (bf16), wo_b (FP8).
  const int G = p.o_groups, heads_per_group = H / G, r_o = p.o_lora_rank;
  const int64_t group_in = static_cast<int64_t>(heads_per_group) * d;
  parallel_for(n, [&](int64_t b, int64_t e) {
    std::vector<float> z(static_cast<size_t>(G) * r_o);
    for (int64_t t = b; t < e; ++t) {
      const int64_t pos = start_pos + t;
      auto ot = std::span(attn).subspan(t * H * d, H * d);
      for (int h = 0; h < H; ++h) rope.apply(ot.subspan(h * d, d), pos, /*inverse=*/true);
      for (int g = 0; g < G; ++g) {
        const float* u = ot.data() + g * group_in;
        for (int r = 0; r < r_o; ++r) {
          const float* wrow = w.wo_a.weight.data() + (static_cast<int64_t>(g) * r_o + r) * group_in;
          double acc = 0.0;
          for (int64_t k = 0; k < group_in; ++k) acc += static_cast<double>(u[k]) * wrow[k];
          z[g * r_o + r] = round_bf16(static_cast<float>(acc));
        }
      }
      w.wo_b.forward(z, out.subspan(t * D, D));
    }
  });
}

}  // namespace dsv4::cpu
