#include "engine/scheduler.h"

#include <algorithm>

namespace dsv4::engine {

void Scheduler::enqueue(Sequence* seq) {
  DSV4_CHECK(seq->state() == RequestState::kQueued, "enqueue in state ", to_string(seq->state()));
  waiting_.push_back(seq);
}

BatchPlan Scheduler::schedule(KvCacheManager& cache) {
  const bool has_decode = std::any_of(running_.begin(), running_.end(),
                                      [](Sequence* s) { return s->state() == RequestState::kDecoding; });
  const bool has_prefill =
      (!waiting_.empty() && num_running() < config_.max_running_requests) ||
      std::any_of(running_.begin(), running_.end(),
                  [](Sequence* s) { return s->state() == RequestState::kPrefilling; });
  if (has_prefill && (!has_decode || last_kind_ != BatchPlan::Kind::kPrefill)) {
    BatchPlan plan = schedule_prefill(cache);
    if (!plan.items.empty()) {
      last_kind_ = BatchPlan::Kind::kPrefill;
      return plan;
    }
  }
  if (has_decode) {
    BatchPlan plan = schedule_decode(cache);
    last_kind_ = BatchPlan::Kind::kDecode;
    return plan;
  }
  last_kind_ = BatchPlan::Kind::kIdle;
  return {};
}

BatchPlan Scheduler::schedule_prefill(KvCacheManager& cache) {
  BatchPlan plan;
  plan.kind = BatchPlan::Kind::kPrefill;
  int64_t budget = config_.chunked_prefill_size;
  int64_t pending = 0;  // tokens already-running sequences still need (admission headroom)
  for (Sequence* s : running_) {
    if (s->state() == RequestState::kDecoding) {
      pending += 1;
      continue;
    }
    const int64_t n = std::min(s->remaining_prefill(), budget);
    const bool ok = n > 0 && cache.append(s->id, n);
    if (ok) {
      plan.items.push_back({s, s->num_computed, n, s->num_computed + n == static_cast<int64_t>(s->tokens.size())});
      budget -= n;
      plan.new_tokens += n;
    }
    pending += s->remaining_prefill() - (ok ? n : 0);
  }
  while (budget > 0 && !waiting_.empty() && num_running() < config_.max_running_requests) {
    Sequence* s = waiting_.front();
    const int64_t need = static_cast<int64_t>(s->tokens.size());
    const int64_t want = running_.empty() ? need : need + 1 + pending;
    if (!cache.can_admit(want)) break;
    cache.allocate(s->id);
    const int64_t n = std::min(need, budget);
    DSV4_CHECK(cache.append(s->id, n), "admitted sequence ", s->id, " cannot append its first chunk");
    waiting_.pop_front();
    s->admit();
    running_.push_back(s);
    plan.items.push_back({s, 0, n, n == need});
    plan.new_seqs += 1;
    plan.new_tokens += n;
    budget -= n;
    pending += need - n + 1;
  }
  return plan;
}

BatchPlan Scheduler::schedule_decode(KvCacheManager& cache) {
  BatchPlan plan;
  plan.kind = BatchPlan::Kind::kDecode;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* s = running_[i];
    if (s->state() != RequestState::kDecoding) continue;
    bool scheduled = true;
    while (!cache.append(s->id, 1)) {
      Sequence* victim = running_.back();  // newest; never one already in the plan
      preempt(victim, cache, plan);
      if (victim == s) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;  // s was the newest: nothing after it remains
    plan.items.push_back({s, s->num_computed, 1, true});
    plan.new_tokens += 1;
  }
  return plan;
}

void Scheduler::preempt(Sequence* seq, KvCacheManager& cache, BatchPlan& plan) {
  cache.free(seq->id);
  seq->preempt();
  std::erase(running_, seq);
  waiting_.push_front(seq);
  plan.preempted.push_back(seq);
}

void Scheduler::on_step_done(const BatchPlan& plan) {
  for (const PlanItem& item : plan.items) {
    Sequence* s = item.seq;
    s->num_computed += item.num_tokens;
    if (s->state() == RequestState::kPrefilling && s->remaining_prefill() == 0) s->start_decode();
  }
}

void Scheduler::remove(Sequence* seq, KvCacheManager& cache) {
  std::erase(running_, seq);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) waiting_.erase(it);
  cache.free(seq->id);
}

}  // namespace dsv4::engine
