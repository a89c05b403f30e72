#include "engine/gpu_runner.h"

#include <algorithm>

#include "base/check.h"
#include "engine/log.h"

namespace dsv4::engine {
namespace {

int64_t state_bytes(const gpu::GpuSequenceState& s) {
  int64_t total = 0;
  for (const gpu::GpuLayerCache& c : s.layers) {
    total += static_cast<int64_t>(c.window.bytes() + c.compressed.bytes() + c.index_keys.bytes() +
                                  c.comp_kv.bytes() + c.comp_score.bytes() + c.index_kv.bytes() +
                                  c.index_score.bytes());
  }
  return total;
}

}  // namespace

GpuRunner::GpuRunner(std::unique_ptr<gpu::GpuModel> model) : model_(std::move(model)) {
  DSV4_CHECK(model_ != nullptr, "GpuRunner needs a model");
  state_bytes_ = std::max<int64_t>(1, state_bytes(model_->new_sequence()));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  log::info(str_cat("CUDA runner: ", state_bytes_, " device bytes of state per sequence (max context ",
                    max_context(), "); ", static_cast<int64_t>(free_b) / state_bytes_,
                    " sequences fit in the free device memory (", free_b >> 20, " MiB free of ", total_b >> 20,
                    " MiB)"));
}

GpuRunner::~GpuRunner() = default;

CacheLayout GpuRunner::cache_layout() const {
  // One fixed entry per sequence, as large as its device state: admission accounting only.
  CacheLayout layout;
  layout.pools.push_back({.name = "cuda.sequence_state", .bytes_per_entry = state_bytes_, .tokens_per_entry = 1,
                          .entries_per_page = 1, .kind = PoolKind::kState, .ring_entries = 1});
  return layout;
}

void GpuRunner::forward(std::span<const Item> items, std::span<float> logits_out) {
  const int64_t vocab = vocab_size();
  DSV4_CHECK(static_cast<int64_t>(logits_out.size()) == static_cast<int64_t>(items.size()) * vocab,
             "GpuRunner: logits buffer has ", logits_out.size(), " floats for ", items.size(), " items");
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    auto it = states_.find(item.seq);
    if (item.start_pos == 0) {
      if (it == states_.end()) {
        it = states_.emplace(item.seq, model_->new_sequence()).first;
      } else if (it->second.length != 0) {
        it->second = model_->new_sequence();  // recomputation from scratch
      }
    } else {
      DSV4_CHECK(it != states_.end(), "GpuRunner: sequence ", item.seq, " continues at position ", item.start_pos,
                 " but has no device state");
      DSV4_CHECK(it->second.length == item.start_pos, "GpuRunner: sequence ", item.seq, " holds ",
                 it->second.length, " positions, the step starts at ", item.start_pos);
    }
    try {
      const auto out = model_->forward(it->second, item.tokens, false, item.prompt_length, false);
      DSV4_CHECK(static_cast<int64_t>(out.logits.size()) == vocab, "GpuRunner: logits size");
      std::copy(out.logits.begin(), out.logits.end(), logits_out.begin() + static_cast<int64_t>(i) * vocab);
    } catch (...) {
      states_.erase(item.seq);  // a half-updated state must not be continued
      throw;
    }
  }
}

}  // namespace dsv4::engine
