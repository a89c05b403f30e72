// TestRunner: a small deterministic ModelRunner for engine and server tests (test-only).
//
// Logits are a pure function of the sequence's whole token history (a rolling hash), so
// a request gets the same logits whatever else is in the batch, and a recomputed sequence
// gets the same logits again. It checks the runner contract (positions continue where the
// sequence left off, fresh sequences start at 0) and writes every token through the cache
// manager's entries. `forced(history)` may return a token id that then dominates the row.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "base/check.h"
#include "engine/model_runner.h"

namespace dsv4::engine::testing {

class TestRunner : public ModelRunner {
 public:
  explicit TestRunner(int64_t vocab = 300, int64_t max_context = 512) : vocab_(vocab), max_context_(max_context) {}

  int64_t vocab_size() const override { return vocab_; }
  int64_t max_context() const override { return max_context_; }
  CacheLayout cache_layout() const override {
    CacheLayout l;
    if (device_slots > 0) {  // like GpuRunner: fixed device slots, accounted only
      l.pools.push_back({.name = "device.sequence_state", .bytes_per_entry = int64_t{1} << 30, .tokens_per_entry = 1,
                         .entries_per_page = 1, .kind = PoolKind::kState, .ring_entries = 1,
                         .device_resident = true});
      l.max_sequences = device_slots;
      l.byte_budget = device_slots * (int64_t{1} << 30);
      return l;
    }
    l.pools.push_back({"layer0.window", 8, 1, 4, PoolKind::kRing, 8});
    l.pools.push_back({"layer0.csa_kv", 8, 4, 4, PoolKind::kPaged, 0});
    l.pools.push_back({"layer0.compressor", 16, 1, 1, PoolKind::kState, 2});
    return l;
  }
  void forward(std::span<const Item> items, std::span<float> logits_out) override {
    DSV4_CHECK(logits_out.size() == items.size() * static_cast<size_t>(vocab_), "bad logits size");
    if (step_delay.count() > 0) std::this_thread::sleep_for(step_delay);
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      State& st = state_[it.seq];
      if (it.start_pos == 0) st = State{};
      DSV4_CHECK(it.start_pos == st.next_pos, "sequence ", it.seq, " resumed at ", it.start_pos, ", expected ",
                 st.next_pos);
      DSV4_CHECK(it.blocks != nullptr && it.blocks->num_tokens >= it.start_pos + (int64_t)it.tokens.size(),
                 "block table too short");
      for (int32_t t : it.tokens) {
        st.hash = mix(st.hash ^ static_cast<uint64_t>(t));
        st.history.push_back(t);
        ++st.next_pos;
      }
      float* row = logits_out.data() + i * vocab_;
      for (int64_t v = 0; v < vocab_; ++v) {
        row[v] = static_cast<float>(mix(st.hash + static_cast<uint64_t>(v)) >> 40) / float(1 << 24) * 4.0f;
      }
      if (forced) {
        const int32_t f = forced(st.history);
        if (f >= 0 && f < vocab_) row[f] += 40.0f;
      }
      ++forward_items;
    }
    peak_live_states = std::max(peak_live_states, state_.size());
  }
  // Device-sampling emulation (device_sampling = true): forward(), then every other sampling item
  // (odd index) is "sampled on the device" by a fresh host Sampler built from its DeviceDraw
  // (no penalties; min_p must be 0: the draw carries log(min_p) only) with the draw's uniform;
  // the others come back as logits for the engine's host path. Exercises the engine's
  // forward_sampled plumbing without a GPU.
  bool samples_on_device() const override { return device_sampling; }
  void forward_sampled(std::span<const Item> items, std::span<const DrawRequest* const> draws,
                       std::span<DrawResult> results, std::span<float> logits_out) override {
    forward(items, logits_out);
    for (size_t i = 0; i < items.size(); ++i) {
      DrawResult& r = results[i];
      r.on_device = false;
      const DrawRequest* d = draws[i];
      if (d == nullptr || !d->draw.eligible || i % 2 == 0) continue;
      SamplingParams sp;
      sp.temperature = d->draw.greedy ? 0.0f : static_cast<float>(1.0 / d->draw.inv_temperature);
      sp.top_p = d->draw.top_p;
      sp.top_k = d->draw.top_k;
      std::vector<float> row(logits_out.begin() + static_cast<int64_t>(i) * vocab_,
                             logits_out.begin() + static_cast<int64_t>(i + 1) * vocab_);
      for (int32_t id : d->banned) row[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
      Sampler s(sp, d->sample_vocab, 0, {});
      r.token = s.sample(row, d->logprobs ? &r.logprob : nullptr, &d->draw.u);
      r.on_device = true;
      ++device_sampled;
    }
  }
  void release(SequenceId seq) override { state_.erase(seq); }
  std::string name() const override { return "test"; }

  size_t live_states() const { return state_.size(); }

  std::function<int32_t(const std::vector<int32_t>& history)> forced;
  std::chrono::microseconds step_delay{0};
  int64_t forward_items = 0;
  size_t peak_live_states = 0;
  int64_t device_slots = 0;  // > 0: a device-resident layout of this many sequence slots
  bool device_sampling = false;  // emulate a runner that samples on its device (forward_sampled)
  int64_t device_sampled = 0;    // rows it sampled that way

  static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

 private:
  struct State {
    int64_t next_pos = 0;
    uint64_t hash = 0;
    std::vector<int32_t> history;
  };
  int64_t vocab_;
  int64_t max_context_;
  std::unordered_map<SequenceId, State> state_;
};

}  // namespace dsv4::engine::testing
