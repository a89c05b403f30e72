// GpuRunner: the CUDA backend (gpu::GpuModel) behind the engine's ModelRunner interface.
//
// Per-sequence state (window ring, compressed KV, indexer keys, compressor states) lives on
// the device in a gpu::GpuStatePool: one allocation of fixed slots, each sized for
// max_context() positions, planned at construction by model::plan_state_slots
// (--mem-fraction-static, after the weights are loaded). A sequence takes a slot when it
// starts at position 0 and gives it back in release(); nothing is allocated per request.
// With tensor parallelism every rank (device) has its own pool and a sequence holds the same
// slot in each (its peers' states).
// cache_layout() describes the slots as one device-resident kState pool with
// max_sequences = the slot count: the engine's KvCacheManager only accounts them (no host
// arena) and the engine admits at most that many sequences.
// Items of one forward(): the decode items (one token, continuing past the prompt) run as ONE
// batched GpuModel::decode() (a CUDA-graph replay when graphs are enabled, padded to the next
// captured batch size); the others (prefill chunks, multi-token steps) one forward() each.
// forward_sampled() samples the decode rows on the GPU, so only their tokens cross to the host.
// Compiled only when the CUDA backend is built (DSV4_WITH_CUDA).
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/model_runner.h"
#include "gpu/gpu_model.h"
#include "gpu/state_pool.h"
#include "model/state_plan.h"

namespace dsv4::engine {

struct GpuRunnerOptions {
  int64_t max_running_requests = 64;  // sequence slots wanted (fewer when memory is short)
  double mem_fraction_static = 0.88;  // SGLang's meaning: weights + state pool share of the device
  int64_t reserve_bytes = model::kDefaultActivationReserveBytes;  // activations, CUDA graphs
  // CUDA graphs for decode batches of up to this many sequences, captured at construction
  // (GpuModel::decode_graph_batch_sizes); 0 = eager decode only.
  int cuda_graph_max_bs = 0;
  // Decode rows sampled on the GPU (only token ids come back); false: every row's logits are
  // copied to the host and sampled there (A/B, debugging).
  bool device_sampling = true;
};

class GpuRunner : public ModelRunner {
 public:
  // The model's max_seq_len is the runner's max context. Throws dsv4::Error (naming
  // --mem-fraction-static) when not even one sequence slot fits.
  explicit GpuRunner(std::unique_ptr<gpu::GpuModel> model, GpuRunnerOptions options = {});
  ~GpuRunner() override;

  int64_t vocab_size() const override { return model_->config().vocab_size; }
  int64_t max_context() const override { return model_->max_seq_len(); }
  CacheLayout cache_layout() const override;
  void forward(std::span<const Item> items, std::span<float> logits_out) override;
  // Decode items are sampled on rank 0's GPU (gpu/sampling.h) when their draw is eligible
  // (no penalties, ≤ gpu::kSampleMaxBanned banned ids); prefill items return logits.
  bool samples_on_device() const override { return device_sampling_; }
  void forward_sampled(std::span<const Item> items, std::span<const DrawRequest* const> draws,
                       std::span<DrawResult> results, std::span<float> logits_out) override;
  void release(SequenceId seq) override;
  std::string name() const override { return "cuda"; }

  // Device bytes of one sequence's state slot (all layers, MTP blocks included).
  int64_t state_bytes_per_sequence() const { return pools_[0]->slot_bytes(); }
  int64_t max_sequences() const { return plan_.max_sequences; }
  int64_t live_sequences() const { return static_cast<int64_t>(states_.size()); }
  const model::StatePlan& plan() const { return plan_; }
  gpu::GpuStatePool& state_pool(int rank = 0) { return *pools_.at(static_cast<size_t>(rank)); }
  gpu::GpuModel& model() { return *model_; }
  bool cuda_graphs() const { return model_->decode_graphs_enabled(); }

 private:
  // The state of item.seq, acquired (start_pos 0, new sequence), reset (start_pos 0 again:
  // recomputation) or continued (checked against start_pos).
  gpu::GpuSequenceState& state_for(const Item& item);
  gpu::GpuSequenceState acquire_all();  // a slot in every rank's pool
  // forward() and forward_sampled(): draws/results empty = no device sampling.
  void run(std::span<const Item> items, std::span<const DrawRequest* const> draws, std::span<DrawResult> results,
           std::span<float> logits_out);

  std::unique_ptr<gpu::GpuModel> model_;
  model::StatePlan plan_;
  std::vector<std::unique_ptr<gpu::GpuStatePool>> pools_;  // [tp rank]
  std::unordered_map<SequenceId, gpu::GpuSequenceState> states_;
  bool device_sampling_ = true;
  std::vector<float> decode_logits_;  // [decode rows, vocab] host copy of the decode logits
};

}  // namespace dsv4::engine
