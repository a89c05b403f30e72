#include "engine/gpu_runner.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "base/check.h"
#include "engine/log.h"

namespace dsv4::engine {

GpuRunner::GpuRunner(std::unique_ptr<gpu::GpuModel> model, GpuRunnerOptions options)
    : model_(std::move(model)), device_sampling_(options.device_sampling) {
  DSV4_CHECK(model_ != nullptr, "GpuRunner needs a model");
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<gpu::LayerStateShape> shape = gpu::sequence_state_shape(*model_);
  // The tightest rank decides (tensor parallelism: devices 0..tp-1).
  size_t free_b = SIZE_MAX, total_b = 0;
  for (int r = model_->tp_size() - 1; r >= 0; --r) {
    CUDA_CHECK(cudaSetDevice(r));
    CUDA_CHECK(cudaDeviceSynchronize());
    size_t f = 0, t = 0;
    CUDA_CHECK(cudaMemGetInfo(&f, &t));
    if (f < free_b) free_b = f, total_b = t;
  }  // ends on device 0
  model::StatePlanInput in;
  in.total_bytes = static_cast<int64_t>(total_b);
  in.used_bytes = static_cast<int64_t>(total_b - free_b);
  in.mem_fraction_static = options.mem_fraction_static;
  in.reserve_bytes = options.reserve_bytes;
  in.slot_bytes = gpu::GpuStatePool::slot_bytes_for(shape);
  in.max_running_requests = options.max_running_requests;
  in.padding_slots = 0;  // graph padding rows use GpuModel's own scratch sequence
  in.max_context = max_context();
  plan_ = model::plan_state_slots(in);
  // One pool per tensor-parallel rank (device r); a sequence holds the same slot in each.
  for (int r = 0; r < model_->tp_size(); ++r)
    pools_.push_back(std::make_unique<gpu::GpuStatePool>(shape, plan_.slots, r));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  log::info(str_cat("CUDA runner: device memory ", total_b >> 20, " MiB, ", in.used_bytes >> 20,
                    " MiB in use after loading the weights, ", in.reserve_bytes >> 20,
                    " MiB reserved for activations/graphs, budget ", plan_.budget_bytes >> 20,
                    " MiB; pool allocated in ", static_cast<int64_t>(ms), " ms"));
  log::info(plan_.summary());
  const int64_t main_kv = gpu::GpuStatePool::main_kv_bytes_for(shape);
  log::info(str_cat("sequence slot: ", in.slot_bytes, " bytes, of which ", main_kv,
                    " main KV (window rings + compressed entries, 584-byte FP8 entries) and ", in.slot_bytes - main_kv,
                    " indexer keys + compressor states (fp32)"));
  log::info(device_sampling_ ? "sampling: decode rows on the GPU (only token ids leave the device)"
                             : "sampling: on the host (decode logits copied back)");
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
  // One fixed entry per sequence, as large as its device slot: admission accounting only.
  CacheLayout layout;
  layout.pools.push_back({.name = "cuda.sequence_state", .bytes_per_entry = pools_[0]->slot_bytes(),
                          .tokens_per_entry = 1, .entries_per_page = 1, .kind = PoolKind::kState,
                          .ring_entries = 1, .device_resident = true});
  layout.max_sequences = plan_.max_sequences;
  layout.byte_budget = plan_.max_sequences * pools_[0]->slot_bytes();
  return layout;
}

void GpuRunner::release(SequenceId seq) {
  const auto it = states_.find(seq);
  if (it == states_.end()) return;
  pools_[0]->release(it->second.slot);
  for (size_t r = 1; r < pools_.size(); ++r) pools_[r]->release(it->second.peers[r - 1].slot);
  states_.erase(it);
}

gpu::GpuSequenceState GpuRunner::acquire_all() {
  gpu::GpuSequenceState own = pools_[0]->acquire();
  for (size_t r = 1; r < pools_.size(); ++r) own.peers.push_back(pools_[r]->acquire());
  return own;
}

gpu::GpuSequenceState& GpuRunner::state_for(const Item& item) {
  auto it = states_.find(item.seq);
  if (item.start_pos == 0) {
    if (it == states_.end()) {
      it = states_.emplace(item.seq, acquire_all()).first;
    } else if (it->second.length != 0) {  // recomputation from scratch
      pools_[0]->reset(it->second);
      for (size_t r = 1; r < pools_.size(); ++r) pools_[r]->reset(it->second.peers[r - 1]);
    }
    return it->second;
  }
  DSV4_CHECK(it != states_.end(), "GpuRunner: sequence ", item.seq, " continues at position ", item.start_pos,
             " but has no device state");
  DSV4_CHECK(it->second.length == item.start_pos, "GpuRunner: sequence ", item.seq, " holds ", it->second.length,
             " positions, the step starts at ", item.start_pos);
  return it->second;
}

void GpuRunner::forward(std::span<const Item> items, std::span<float> logits_out) { run(items, {}, {}, logits_out); }

void GpuRunner::forward_sampled(std::span<const Item> items, std::span<const DrawRequest* const> draws,
                                std::span<DrawResult> results, std::span<float> logits_out) {
  DSV4_CHECK(draws.size() == items.size() && results.size() == items.size(), "GpuRunner: ", draws.size(),
             " draws and ", results.size(), " results for ", items.size(), " items");
  run(items, draws, results, logits_out);
}

namespace {
gpu::SampleParams device_params(const ModelRunner::DrawRequest* d) {
  gpu::SampleParams p;
  if (d == nullptr || !d->draw.eligible || d->banned.size() > static_cast<size_t>(gpu::kSampleMaxBanned) ||
      d->sample_vocab <= 0 || d->top_logprobs > gpu::kSampleMaxTopLogprobs)
    return p;  // on_device = 0: the host samples this row
  p.on_device = 1;
  p.greedy = d->draw.greedy ? 1 : 0;
  p.sample_vocab = static_cast<int32_t>(std::min<int64_t>(d->sample_vocab, INT32_MAX));
  p.top_k = d->draw.top_k;
  p.top_p = d->draw.top_p;
  p.min_rel = d->draw.min_rel;
  p.inv_temperature = d->draw.inv_temperature;
  p.u = d->draw.u;
  p.logprobs = d->logprobs ? 1 : 0;
  p.top_logprobs = d->logprobs ? d->top_logprobs : 0;
  p.num_banned = static_cast<int32_t>(d->banned.size());
  std::copy(d->banned.begin(), d->banned.end(), p.banned);
  return p;
}
}  // namespace

void GpuRunner::run(std::span<const Item> items, std::span<const DrawRequest* const> draws,
                    std::span<DrawResult> results, std::span<float> logits_out) {
  const int64_t vocab = vocab_size();
  DSV4_CHECK(static_cast<int64_t>(logits_out.size()) == static_cast<int64_t>(items.size()) * vocab,
             "GpuRunner: logits buffer has ", logits_out.size(), " floats for ", items.size(), " items");
  const bool sampling = !draws.empty();
  for (DrawResult& r : results) r.on_device = false;
  std::vector<size_t> decode_items;
  std::vector<gpu::GpuSequenceState*> decode_states;
  std::vector<int32_t> decode_tokens;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    gpu::GpuSequenceState& state = state_for(item);
    // decode() equals forward() with the whole window as the window part: a single token past
    // the prompt (a last one-token prefill chunk keeps the prompt's one-shot layout: forward).
    const bool decode_item = item.tokens.size() == 1 && item.start_pos > 0 && item.start_pos >= item.prompt_length;
    if (decode_item) {
      decode_items.push_back(i);
      decode_states.push_back(&state);
      decode_tokens.push_back(item.tokens[0]);
      continue;
    }
    try {
      const auto out = model_->forward(state, item.tokens, false, item.prompt_length, false);
      DSV4_CHECK(static_cast<int64_t>(out.logits.size()) == vocab, "GpuRunner: logits size");
      std::copy(out.logits.begin(), out.logits.end(), logits_out.begin() + static_cast<int64_t>(i) * vocab);
    } catch (...) {
      release(item.seq);  // a half-updated state must not be continued
      throw;
    }
  }
  if (decode_items.empty()) return;
  const size_t B = decode_items.size();
  decode_logits_.resize(B * static_cast<size_t>(vocab));  // kept: no 33 MB allocation per step
  const std::span<float> logits(decode_logits_);
  std::vector<gpu::SampleParams> params;
  std::vector<gpu::SampleResult> sampled;
  gpu::GpuModel::DecodeSampling ds;
  if (sampling) {
    params.resize(B);
    sampled.resize(B);
    for (size_t j = 0; j < B; ++j) params[j] = device_params(draws[decode_items[j]]);
    ds.params = params;
    ds.results = sampled;
  }
  try {
    model_->decode(decode_states, decode_tokens, logits, gpu::GpuModel::DecodeMode::kAuto, sampling ? &ds : nullptr);
  } catch (...) {
    for (size_t j : decode_items) release(items[j].seq);  // half-updated states must not be continued
    throw;
  }
  for (size_t j = 0; j < B; ++j) {
    const size_t i = decode_items[j];
    if (sampling && params[j].on_device) {
      DrawResult& r = results[i];
      const gpu::SampleResult& g = sampled[j];
      DSV4_CHECK(g.token >= 0 && g.token < vocab, "GpuRunner: device sampler returned token ", g.token);
      r.on_device = true;
      r.token = g.token;
      r.logprob.id = g.token;
      r.logprob.logprob = g.logprob;
      r.logprob.top.clear();
      for (int t = 0; t < g.num_top; ++t) r.logprob.top.emplace_back(g.top_id[t], g.top_logprob[t]);
      continue;
    }
    std::copy(logits.begin() + static_cast<int64_t>(j) * vocab, logits.begin() + static_cast<int64_t>(j + 1) * vocab,
              logits_out.begin() + static_cast<int64_t>(i) * vocab);
  }
}

}  // namespace dsv4::engine
