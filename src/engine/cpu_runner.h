// CpuRunner: the CPU reference model (src/cpu) behind the engine's ModelRunner interface.
//
// Every per-sequence state lives in the engine's KvCacheManager pools (one ring pool per
// layer for the window, paged pools for compressed KV and indexer keys, a state pool per
// compressor), so a sequence's complete state can be exported/imported page by page.
// Entries are stored as fp32 (bf16-valued) numbers, as the CPU model computes with them.
// Items of one forward() run one after another; each uses all CPU threads internally.
#pragma once

#include <memory>

#include "cpu/model.h"
#include "engine/model_runner.h"

namespace dsv4::engine {

class CpuRunner : public ModelRunner {
 public:
  explicit CpuRunner(std::shared_ptr<const cpu::CpuModel> model, int64_t max_context = 0);

  int64_t vocab_size() const override { return model_->config().vocab_size; }
  int64_t max_context() const override { return max_context_; }
  CacheLayout cache_layout() const override;
  void bind_cache(KvCacheManager& cache) override { cache_ = &cache; }
  void forward(std::span<const Item> items, std::span<float> logits_out) override;
  void release(SequenceId /*seq*/) override {}  // nothing outside the pools
  std::string name() const override { return "cpu"; }

 private:
  // Pool indices of one layer in cache_layout() (−1 = absent).
  struct LayerPools {
    int window = -1, kv = -1, index_keys = -1, compressor = -1, index_compressor = -1;
  };
  std::shared_ptr<const cpu::CpuModel> model_;
  int64_t max_context_;
  std::vector<LayerPools> pools_;  // trunk layers, then MTP blocks
  CacheLayout layout_;
  KvCacheManager* cache_ = nullptr;
};

}  // namespace dsv4::engine
