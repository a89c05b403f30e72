#include "engine/gpu_runner.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"
#include "engine/log.h"

namespace dsv4::engine {

GpuRunner::GpuRunner(std::unique_ptr<gpu::GpuModel> model, GpuRunnerOptions options) : model_(std::move(model)) {
  DSV4_CHECK(model_ != nullptr, "GpuRunner needs a model");
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<gpu::LayerStateShape> shape = gpu::sequence_state_shape(*model_);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  model::StatePlanInput in;
  in.total_bytes = static_cast<int64_t>(total_b);
  in.used_bytes = static_cast<int64_t>(total_b - free_b);
  in.mem_fraction_static = options.mem_fraction_static;
  in.reserve_bytes = options.reserve_bytes;
  in.slot_bytes = gpu::GpuStatePool::slot_bytes_for(shape);
  in.max_running_requests = options.max_running_requests;
  in.padding_slots = 1;
  in.max_context = max_context();
  plan_ = model::plan_state_slots(in);
  pool_ = std::make_unique<gpu::GpuStatePool>(shape, plan_.slots);
  padding_ = pool_->acquire();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  log::info(str_cat("CUDA runner: device memory ", total_b >> 20, " MiB, ", in.used_bytes >> 20,
                    " MiB in use after loading the weights, ", in.reserve_bytes >> 20,
                    " MiB reserved for activations/graphs, budget ", plan_.budget_bytes >> 20,
                    " MiB; pool allocated in ", static_cast<int64_t>(ms), " ms"));
  log::info(plan_.summary());
}

GpuRunner::~GpuRunner() = default;

CacheLayout GpuRunner::cache_layout() const {
  // One fixed entry per sequence, as large as its device slot: admission accounting only.
  CacheLayout layout;
  layout.pools.push_back({.name = "cuda.sequence_state", .bytes_per_entry = pool_->slot_bytes(),
                          .tokens_per_entry = 1, .entries_per_page = 1, .kind = PoolKind::kState,
                          .ring_entries = 1, .device_resident = true});
  layout.max_sequences = plan_.max_sequences;
  layout.byte_budget = plan_.max_sequences * pool_->slot_bytes();
  return layout;
}

void GpuRunner::release(SequenceId seq) {
  const auto it = states_.find(seq);
  if (it == states_.end()) return;
  pool_->release(it->second.slot);
  states_.erase(it);
}

gpu::GpuSequenceState& GpuRunner::state_for(const Item& item) {
  auto it = states_.find(item.seq);
  if (item.start_pos == 0) {
    if (it == states_.end()) {
      it = states_.emplace(item.seq, pool_->acquire()).first;
    } else if (it->second.length != 0) {
      pool_->reset(it->second);  // recomputation from scratch
    }
    return it->second;
  }
  DSV4_CHECK(it != states_.end(), "GpuRunner: sequence ", item.seq, " continues at position ", item.start_pos,
             " but has no device state");
  DSV4_CHECK(it->second.length == item.start_pos, "GpuRunner: sequence ", item.seq, " holds ", it->second.length,
             " positions, the step starts at ", item.start_pos);
  return it->second;
}

void GpuRunner::forward(std::span<const Item> items, std::span<float> logits_out) {
  const int64_t vocab = vocab_size();
  DSV4_CHECK(static_cast<int64_t>(logits_out.size()) == static_cast<int64_t>(items.size()) * vocab,
             "GpuRunner: logits buffer has ", logits_out.size(), " floats for ", items.size(), " items");
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    gpu::GpuSequenceState& state = state_for(item);
    try {
      const auto out = model_->forward(state, item.tokens, false, item.prompt_length, false);
      DSV4_CHECK(static_cast<int64_t>(out.logits.size()) == vocab, "GpuRunner: logits size");
      std::copy(out.logits.begin(), out.logits.end(), logits_out.begin() + static_cast<int64_t>(i) * vocab);
    } catch (...) {
      release(item.seq);  // a half-updated state must not be continued
      throw;
    }
  }
}

}  // namespace dsv4::engine
