#include "engine/gpu_runner.h"

#include <algorithm>
#include <string>
#include <vector>

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

GpuRunner::GpuRunner(std::unique_ptr<gpu::GpuModel> model, GpuRunnerOptions options) : model_(std::move(model)) {
  DSV4_CHECK(model_ != nullptr, "GpuRunner needs a model");
  state_bytes_ = std::max<int64_t>(1, state_bytes(model_->new_sequence()));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  log::info(str_cat("CUDA runner: ", state_bytes_, " device bytes of state per sequence (max context ",
                    max_context(), "); ", static_cast<int64_t>(free_b) / state_bytes_,
                    " sequences fit in the free device memory (", free_b >> 20, " MiB free of ", total_b >> 20,
                    " MiB)"));
  if (options.cuda_graph_max_bs > 0) {
    model_->enable_decode_graphs(options.cuda_graph_max_bs);
    const double s = model_->capture_decode_graphs();
    const auto& sizes = model_->decode_graph_sizes();
    std::string list;
    for (int b : sizes) list += (list.empty() ? "" : ", ") + std::to_string(b);
    log::info(str_cat("CUDA graphs: captured ", sizes.size(), " decode graphs (batch sizes ", list, ") in ",
                      static_cast<int64_t>(s * 1000), " ms"));
  }
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
  std::vector<size_t> decode_items;
  std::vector<gpu::GpuSequenceState*> decode_states;
  std::vector<int32_t> decode_tokens;
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
    // decode() equals forward() with the whole window as the window part: a single token past
    // the prompt (a last one-token prefill chunk keeps the prompt's one-shot layout: forward).
    const bool decode_item = item.tokens.size() == 1 && item.start_pos > 0 && item.start_pos >= item.prompt_length;
    if (decode_item) {
      decode_items.push_back(i);
      decode_states.push_back(&it->second);
      decode_tokens.push_back(item.tokens[0]);
      continue;
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
  if (decode_items.empty()) return;
  std::vector<float> logits(decode_items.size() * static_cast<size_t>(vocab));
  try {
    model_->decode(decode_states, decode_tokens, logits);
  } catch (...) {
    for (size_t j : decode_items) states_.erase(items[j].seq);
    throw;
  }
  for (size_t j = 0; j < decode_items.size(); ++j) {
    std::copy(logits.begin() + static_cast<int64_t>(j) * vocab, logits.begin() + static_cast<int64_t>(j + 1) * vocab,
              logits_out.begin() + static_cast<int64_t>(decode_items[j]) * vocab);
  }
}

}  // namespace dsv4::engine
