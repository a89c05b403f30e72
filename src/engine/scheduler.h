// Scheduler: pure CPU bookkeeping (no model, no threads). It owns the queue order and the
// running set, grows cache tables through the KvCacheManager, and returns one BatchPlan per
// step. The engine runs the plan and reports back with on_step_done().
//
// Policy (SGLang-like, no mixed batches): a step is either a prefill batch (continuing
// chunked prefills first, then new admissions in FIFO order, up to chunked_prefill_size
// tokens and max_running_requests sequences) or a decode batch (one token for every
// decoding sequence). When both are possible they alternate so decoding never starves.
// A decode step that runs out of pages preempts the newest running sequence (recompute).
//
// Thread-safety: none; engine thread only. Does not own sequences.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/cache_manager.h"
#include "engine/sequence.h"

namespace dsv4::engine {

struct SchedulerConfig {
  int64_t max_running_requests = 64;
  int64_t chunked_prefill_size = 2048;  // max prompt tokens per prefill step
};

struct PlanItem {
  Sequence* seq = nullptr;
  int64_t start_pos = 0;
  int64_t num_tokens = 0;
  bool samples = false;  // the last position of this item yields a token
};

struct BatchPlan {
  enum class Kind { kIdle, kPrefill, kDecode };
  Kind kind = Kind::kIdle;
  std::vector<PlanItem> items;
  std::vector<Sequence*> preempted;  // cache already freed; the runner must release them
  int64_t new_seqs = 0;              // prefill: sequences admitted this step
  int64_t new_tokens = 0;            // sum of num_tokens
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config) : config_(config) {}

  void enqueue(Sequence* seq);  // state kQueued, FIFO
  BatchPlan schedule(KvCacheManager& cache);
  // Advances num_computed and moves finished prefills to decoding.
  void on_step_done(const BatchPlan& plan);
  // Removes seq from the queue or the running set (finish/abort); frees its cache.
  void remove(Sequence* seq, KvCacheManager& cache);

  int64_t num_queued() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  const std::vector<Sequence*>& running() const { return running_; }

 private:
  BatchPlan schedule_prefill(KvCacheManager& cache);
  BatchPlan schedule_decode(KvCacheManager& cache);
  void preempt(Sequence* seq, KvCacheManager& cache, BatchPlan& plan);

  SchedulerConfig config_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order
  BatchPlan::Kind last_kind_ = BatchPlan::Kind::kIdle;
};

}  // namespace dsv4::engine
