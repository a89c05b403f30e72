// GpuRunner: the CUDA backend (gpu::GpuModel) behind the engine's ModelRunner interface.
//
// Per-sequence state (window ring, compressed KV, indexer keys, compressor states) lives on
// the device in one gpu::GpuSequenceState per SequenceId, created when a sequence starts at
// position 0 and dropped in release(). Every state is sized for max_context() positions, so
// its device bytes are fixed per sequence: cache_layout() describes them as one kState pool
// so the engine's KvCacheManager counts sequences against its byte budget (admission). The
// runner never reads those host pages.
// Items of one forward(): the decode items (one token, continuing past the prompt) run as ONE
// batched GpuModel::decode() (a CUDA-graph replay when graphs are enabled, padded to the next
// captured batch size); the others (prefill chunks, multi-token steps) one forward() each.
// Compiled only when the CUDA backend is built (DSV4_WITH_CUDA).
#pragma once

#include <memory>
#include <unordered_map>

#include "engine/model_runner.h"
#include "gpu/gpu_model.h"

namespace dsv4::engine {

struct GpuRunnerOptions {
  // CUDA graphs for decode batches of up to this many sequences, captured at construction
  // (GpuModel::decode_graph_batch_sizes); 0 = eager decode only.
  int cuda_graph_max_bs = 0;
};

class GpuRunner : public ModelRunner {
 public:
  // The model's max_seq_len is the runner's max context.
  explicit GpuRunner(std::unique_ptr<gpu::GpuModel> model, GpuRunnerOptions options = {});
  ~GpuRunner() override;

  int64_t vocab_size() const override { return model_->config().vocab_size; }
  int64_t max_context() const override { return model_->max_seq_len(); }
  CacheLayout cache_layout() const override;
  void forward(std::span<const Item> items, std::span<float> logits_out) override;
  void release(SequenceId seq) override { states_.erase(seq); }
  std::string name() const override { return "cuda"; }

  // Device bytes of one sequence's state (all layers, MTP blocks included).
  int64_t state_bytes_per_sequence() const { return state_bytes_; }
  int64_t live_sequences() const { return static_cast<int64_t>(states_.size()); }
  gpu::GpuModel& model() { return *model_; }
  bool cuda_graphs() const { return model_->decode_graphs_enabled(); }

 private:
  std::unique_ptr<gpu::GpuModel> model_;
  std::unordered_map<SequenceId, gpu::GpuSequenceState> states_;
  int64_t state_bytes_ = 0;
};

}  // namespace dsv4::engine
