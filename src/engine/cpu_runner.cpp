#include "engine/cpu_runner.h"

#include <algorithm>

#include "base/check.h"

namespace dsv4::engine {
namespace {

// A layer's state viewed through the cache manager's pages.
class PagedLayerState : public cpu::LayerState {
 public:
  PagedLayerState(KvCacheManager& cache, const BlockTable& table, int window, int kv,
                  int index_keys, int comp, int index_comp, const cpu::LayerStateShape& shape)
      : cache_(cache), table_(table), window_(window), kv_(kv), index_keys_(index_keys),
        comp_(comp), index_comp_(index_comp), shape_(shape) {}

  float* window_slot(int64_t slot) override { return at(window_, slot); }
  float* compressed_entry(int64_t entry) override { return at(kv_, entry); }
  float* index_key(int64_t entry) override { return at(index_keys_, entry); }
  cpu::CompressorStateRef compressor(bool indexer) override {
    const int pool = indexer ? index_comp_ : comp_;
    const int slots = indexer ? shape_.index_slots : shape_.comp_slots;
    const int width = indexer ? shape_.index_width : shape_.comp_width;
    float* base = at(pool, 0);
    return {base, base + static_cast<size_t>(slots) * width, slots, width};
  }

 private:
  float* at(int pool, int64_t entry) {
    DSV4_CHECK(pool >= 0, "layer state has no such pool");
    return reinterpret_cast<float*>(cache_.entry(table_, pool, entry));
  }
  KvCacheManager& cache_;
  const BlockTable& table_;
  int window_, kv_, index_keys_, comp_, index_comp_;
  cpu::LayerStateShape shape_;
};

}  // namespace

CpuRunner::CpuRunner(std::shared_ptr<const cpu::CpuModel> model, int64_t max_context)
    : model_(std::move(model)) {
  const auto& cfg = model_->config();
  max_context_ = max_context > 0 ? std::min(max_context, cfg.max_position_embeddings)
                                 : cfg.max_position_embeddings;
  const int total = cfg.num_layers() + static_cast<int>(cfg.num_nextn_predict_layers);
  auto add = [&](PoolSpec spec) {
    layout_.pools.push_back(std::move(spec));
    return static_cast<int>(layout_.pools.size()) - 1;
  };
  for (int l = 0; l < total; ++l) {
    const cpu::LayerStateShape s = model_->layer_state_shape(l);
    const std::string name =
        l < cfg.num_layers() ? "layer" + std::to_string(l) : "mtp" + std::to_string(l - cfg.num_layers());
    LayerPools p;
    p.window = add({.name = name + ".window", .bytes_per_entry = s.head_dim * 4, .tokens_per_entry = 1,
                    .entries_per_page = s.window, .kind = PoolKind::kRing, .ring_entries = s.window});
    if (s.ratio > 0) {
      // 256 tokens per page on CSA layers, 1024 on HCA layers.
      const int64_t per_page = s.ratio == 4 ? 64 : std::max<int64_t>(1, 1024 / s.ratio);
      p.kv = add({.name = name + ".compressed_kv", .bytes_per_entry = s.head_dim * 4,
                  .tokens_per_entry = s.ratio, .entries_per_page = per_page, .kind = PoolKind::kPaged});
      p.compressor = add({.name = name + ".compressor_state",
                          .bytes_per_entry = int64_t{2} * s.comp_slots * s.comp_width * 4,
                          .tokens_per_entry = 1, .entries_per_page = 1, .kind = PoolKind::kState,
                          .ring_entries = 1});
    }
    if (s.index_head_dim > 0) {
      p.index_keys = add({.name = name + ".indexer_keys", .bytes_per_entry = s.index_head_dim * 4,
                          .tokens_per_entry = s.ratio, .entries_per_page = 64, .kind = PoolKind::kPaged});
      p.index_compressor = add({.name = name + ".indexer_compressor_state",
                                .bytes_per_entry = int64_t{2} * s.index_slots * s.index_width * 4,
                                .tokens_per_entry = 1, .entries_per_page = 1,
                                .kind = PoolKind::kState, .ring_entries = 1});
    }
    pools_.push_back(p);
  }
}

CacheLayout CpuRunner::cache_layout() const { return layout_; }

void CpuRunner::forward(std::span<const Item> items, std::span<float> logits_out) {
  DSV4_CHECK(cache_ != nullptr, "CpuRunner: bind_cache was not called");
  const int64_t vocab = vocab_size();
  DSV4_CHECK(static_cast<int64_t>(logits_out.size()) == static_cast<int64_t>(items.size()) * vocab,
             "CpuRunner: logits buffer has ", logits_out.size(), " floats for ", items.size(), " items");
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    DSV4_CHECK(item.blocks != nullptr, "CpuRunner: item without a block table");
    cpu::SequenceState state;
    state.length = item.start_pos;
    for (size_t l = 0; l < pools_.size(); ++l) {
      const LayerPools& p = pools_[l];
      auto layer = std::make_unique<PagedLayerState>(*cache_, *item.blocks, p.window, p.kv, p.index_keys,
                                                     p.compressor, p.index_compressor,
                                                     model_->layer_state_shape(static_cast<int>(l)));
      // Pages arrive zeroed; a fresh compressor additionally needs score = −inf.
      if (item.start_pos == 0) {
        if (p.compressor >= 0) cpu::reset_compressor_state(layer->compressor(false));
        if (p.index_compressor >= 0) cpu::reset_compressor_state(layer->compressor(true));
      }
      state.layers.push_back(std::move(layer));
    }
    const auto out = model_->forward(state, item.tokens, false, item.prompt_length);
    std::copy(out.logits.begin(), out.logits.end(), logits_out.begin() + static_cast<int64_t>(i) * vocab);
  }
}

}  // namespace dsv4::engine
