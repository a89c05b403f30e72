#include "cpu/model.h"

#include <algorithm>

#include "base/check.h"
#include "base/parallel.h"
#include "cpu/compressor.h"
#include "cpu/linear.h"
#include "model/rope_policy.h"
#include "model/tensor_inventory.h"
#include "numerics/formats.h"

namespace dsv4::cpu {

CpuModel::CpuModel(model::ModelConfig config, std::unique_ptr<ModelWeights> weights)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      rope_window_(model::rope_params(config_, false), config_.max_position_embeddings),
      rope_compress_(model::rope_params(config_, true), config_.max_position_embeddings) {
  hc_params_ = HcParams{.hc = static_cast<int>(config_.hc_mult),
                        .sinkhorn_iters = static_cast<int>(config_.hc_sinkhorn_iters),
                        .hc_eps = static_cast<float>(config_.hc_eps),
                        .norm_eps = static_cast<float>(config_.rms_norm_eps)};
}

std::unique_ptr<CpuModel> CpuModel::from_checkpoint(const model::ModelConfig& config,
                                                    const checkpoint::Checkpoint& ckpt) {
  config.validate();
  model::verify_checkpoint(ckpt, config);
  return std::make_unique<CpuModel>(config, load_weights(ckpt, config));
}

std::unique_ptr<CpuModel> CpuModel::load(const std::filesystem::path& dir) {
  const auto config = model::ModelConfig::from_file(dir / "config.json");
  const auto ckpt = checkpoint::Checkpoint::open(dir);
  return from_checkpoint(config, ckpt);
}

LayerStateShape CpuModel::layer_state_shape(int l) const {
  const BlockWeights& bw =
      l < config_.num_layers() ? weights_->layers[l] : weights_->mtp[l - config_.num_layers()].block;
  LayerStateShape shape{.window = config_.sliding_window,
                        .head_dim = config_.head_dim,
                        .ratio = config_.compress_ratio(l)};
  if (bw.attn.compressor) compressor_state_shape(*bw.attn.compressor, &shape.comp_slots, &shape.comp_width);
  if (bw.attn.indexer) {
    shape.index_head_dim = config_.index_head_dim;
    compressor_state_shape(bw.attn.indexer->compressor, &shape.index_slots, &shape.index_width);
  }
  return shape;
}

SequenceState CpuModel::new_sequence() const {
  SequenceState s;
  const int total = config_.num_layers() + static_cast<int>(config_.num_nextn_predict_layers);
  for (int l = 0; l < total; ++l)
    s.layers.push_back(std::make_unique<DenseLayerState>(layer_state_shape(l)));
  return s;
}

void CpuModel::block_forward(const BlockWeights& w, int layer, LayerState& cache,
                             std::span<const int32_t> ids, int64_t start_pos, int64_t n,
                             int64_t window_len, std::vector<float>& streams,
                             std::vector<int32_t>* routed_last) const {
  const int hc = hc_params_.hc;
  const int64_t D = config_.hidden_size;
  const int ratio = config_.compress_ratio(layer);
  std::vector<float> x(n * D), post(n * hc), comb(n * hc * hc), sub(n * D);
  auto pre = [&](const HcWeights& hw, const std::vector<float>& norm) {
    parallel_for(n, [&](int64_t b, int64_t e) {
      std::vector<float> mixed(D);
      for (int64_t t = b; t < e; ++t) {
        hc_pre(std::span(streams).subspan(t * hc * D, hc * D), hw, hc_params_, mixed,
               std::span(post).subspan(t * hc, hc), std::span(comb).subspan(t * hc * hc, hc * hc));
        rms_norm(mixed, norm, hc_params_.norm_eps, std::span(x).subspan(t * D, D));
      }
    });
  };
  auto post_mix = [&] {
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        hc_post(std::span(sub).subspan(t * D, D), std::span(post).subspan(t * hc, hc),
                std::span(comb).subspan(t * hc * hc, hc * hc), hc,
                std::span(streams).subspan(t * hc * D, hc * D));
    });
  };

  pre(w.hc_attn, w.attn_norm);
  AttentionParams ap{.num_heads = static_cast<int>(config_.num_attention_heads),
                     .head_dim = static_cast<int>(config_.head_dim),
                     .rope_dim = static_cast<int>(config_.qk_rope_head_dim),
                     .window = static_cast<int>(config_.sliding_window),
                     .ratio = ratio,
                     .o_groups = static_cast<int>(config_.o_groups),
                     .o_lora_rank = static_cast<int>(config_.o_lora_rank),
                     .norm_eps = hc_params_.norm_eps,
                     .index_heads = static_cast<int>(config_.index_n_heads),
                     .index_head_dim = static_cast<int>(config_.index_head_dim),
                     .index_topk = static_cast<int>(config_.index_topk)};
  attention_forward(w.attn, ap, ratio > 0 ? rope_compress_ : rope_window_, cache, x, n, start_pos,
                    window_len, sub);
  post_mix();

  pre(w.hc_ffn, w.ffn_norm);
  MoeParams mp{.top_k = static_cast<int>(config_.num_experts_per_tok),
               .route_scale = static_cast<float>(config_.routed_scaling_factor),
               .swiglu_limit = static_cast<float>(config_.swiglu_limit),
               .hash = config_.is_hash_layer(layer)};
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      Routing r;
      moe_forward(std::span(x).subspan(t * D, D), ids[t], w.ffn, mp, std::span(sub).subspan(t * D, D),
                  &r);
      if (routed_last != nullptr && t == n - 1) *routed_last = r.experts;
    }
  });
  post_mix();
}

std::vector<float> CpuModel::head_logits(std::span<const float> streams_last,
                                         const HcWeights& hc_head_w,
                                         std::span<const float> norm) const {
  const int64_t D = config_.hidden_size;
  std::vector<float> y(D), normed(D), logits(config_.vocab_size);
  hc_head(streams_last, hc_head_w, hc_params_, y);
  rms_norm(y, norm, hc_params_.norm_eps, normed);
  parallel_for(
      config_.vocab_size,
      [&](int64_t b, int64_t e) { weights_->head.forward_rows(normed, logits, b, e); },
      /*min_chunk=*/1024);
  return logits;
}

ForwardOutput CpuModel::forward(SequenceState& state, std::span<const int32_t> tokens,
                                bool want_layer_streams, int64_t prompt_length) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t start_pos = state.length;
  DSV4_CHECK(n > 0, "forward needs at least one token");
  DSV4_CHECK(start_pos + n <= config_.max_position_embeddings, "positions ", start_pos, "..",
             start_pos + n - 1, " exceed max_position_embeddings ", config_.max_position_embeddings);
  const int hc = hc_params_.hc;
  const int64_t D = config_.hidden_size;
  for (int32_t id : tokens)
    DSV4_CHECK(id >= 0 && id < config_.vocab_size, "token id ", id, " outside the vocabulary [0, ",
               config_.vocab_size, ")");
  std::vector<float> streams(n * hc * D);
  for (int64_t t = 0; t < n; ++t)
    for (int s = 0; s < hc; ++s)
      std::copy_n(&weights_->embed[tokens[t] * D], D, &streams[(t * hc + s) * D]);

  const int64_t window_len = window_part_length(start_pos, n, prompt_length,
                                                static_cast<int>(config_.sliding_window));
  ForwardOutput out;
  for (int l = 0; l < config_.num_layers(); ++l) {
    std::vector<int32_t> routed;
    block_forward(weights_->layers[l], l, *state.layers[l], tokens, start_pos, n, window_len, streams,
                  want_layer_streams ? &routed : nullptr);
    if (want_layer_streams) {
      out.layer_streams.insert(out.layer_streams.end(), streams.end() - hc * D, streams.end());
      out.routed_experts.push_back(std::move(routed));
    }
  }
  state.length += n;
  out.logits = head_logits(std::span(streams).subspan((n - 1) * hc * D, hc * D), weights_->hc_head,
                           weights_->norm);
  out.final_streams = std::move(streams);
  return out;
}

std::vector<float> CpuModel::mtp_forward(SequenceState& state, std::span<const float> streams_in,
                                         std::span<const int32_t> next_ids, int64_t start_pos,
                                         std::vector<int32_t>* routed_experts) const {
  DSV4_CHECK(!weights_->mtp.empty(), "this model has no MTP block");
  const MtpWeights& m = weights_->mtp[0];
  const int hc = hc_params_.hc;
  const int64_t D = config_.hidden_size;
  const int64_t n = static_cast<int64_t>(next_ids.size());
  DSV4_CHECK(static_cast<int64_t>(streams_in.size()) == n * hc * D, "MTP input streams have ",
             streams_in.size(), " values, expected ", n * hc * D);
  DSV4_CHECK(start_pos == state.mtp_length, "MTP call at position ", start_pos,
             " but its cache holds ", state.mtp_length, " positions");
  std::vector<float> streams(n * hc * D);
  parallel_for(n, [&](int64_t b, int64_t e) {
    std::vector<float> emb(D), proj_e(D), h(D), proj_h(D);
    for (int64_t t = b; t < e; ++t) {
      const int32_t id = next_ids[t];
      DSV4_CHECK(id >= 0 && id < config_.vocab_size, "MTP token id ", id, " outside the vocabulary");
      rms_norm(std::span(weights_->embed).subspan(id * D, D), m.enorm, hc_params_.norm_eps, emb);
      m.e_proj.forward(emb, proj_e);
      for (int s = 0; s < hc; ++s) {
        rms_norm(streams_in.subspan((t * hc + s) * D, D), m.hnorm, hc_params_.norm_eps, h);
        m.h_proj.forward(h, proj_h);
        for (int64_t k = 0; k < D; ++k)
          streams[(t * hc + s) * D + k] = numerics::round_bf16(proj_e[k] + proj_h[k]);
      }
    }
  });
  const int layer = config_.num_layers();
  // The MTP block mirrors the trunk call it follows: prefill layout at 0, decode layout after.
  const int64_t window_len =
      window_part_length(start_pos, n, 0, static_cast<int>(config_.sliding_window));
  block_forward(m.block, layer, *state.layers[layer], next_ids, start_pos, n, window_len, streams,
                routed_experts);
  state.mtp_length += n;
  return head_logits(std::span(streams).subspan((n - 1) * hc * D, hc * D), m.hc_head, m.norm);
}

}  // namespace dsv4::cpu
