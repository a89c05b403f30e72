#include "engine/scheduler.h"

#include <gtest/gtest.h>

namespace dsv4::engine {
namespace {

CacheLayout small_layout() {
  CacheLayout l;
  l.pools.push_back({"w", 8, 1, 4, PoolKind::kRing, 8});
  l.pools.push_back({"kv", 8, 1, 16, PoolKind::kPaged, 0});
  return l;
}

std::unique_ptr<Sequence> make_seq(SequenceId id, int64_t prompt) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->tokens.assign(static_cast<size_t>(prompt), 1);
  s->prompt_len = prompt;
  return s;
}

TEST(Scheduler, ChunkedPrefillThenDecode) {
  KvCacheManager cache(small_layout(), 1 << 20, 4, 256);
  Scheduler sch({/*max_running_requests=*/4, /*chunked_prefill_size=*/100});
  auto a = make_seq(1, 250);
  sch.enqueue(a.get());
  std::vector<int64_t> chunks;
  while (a->state() != RequestState::kDecoding) {
    BatchPlan p = sch.schedule(cache);
    ASSERT_EQ(p.kind, BatchPlan::Kind::kPrefill);
    ASSERT_EQ(p.items.size(), 1u);
    chunks.push_back(p.items[0].num_tokens);
    EXPECT_EQ(p.items[0].samples, p.items[0].start_pos + p.items[0].num_tokens == 250);
    sch.on_step_done(p);
  }
  EXPECT_EQ(chunks, (std::vector<int64_t>{100, 100, 50}));
  a->tokens.push_back(7);  // the sampled token
  BatchPlan d = sch.schedule(cache);
  ASSERT_EQ(d.kind, BatchPlan::Kind::kDecode);
  EXPECT_EQ(d.items[0].start_pos, 250);
  EXPECT_EQ(cache.table(1).num_tokens, 251);
  sch.remove(a.get(), cache);
  EXPECT_EQ(cache.num_sequences(), 0);
  EXPECT_FALSE(sch.has_work());
}

TEST(Scheduler, RespectsMaxRunningAndAlternates) {
  KvCacheManager cache(small_layout(), 1 << 20, 8, 256);
  Scheduler sch({2, 1000});
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < 3; ++i) {
    seqs.push_back(make_seq(i + 1, 10));
    sch.enqueue(seqs.back().get());
  }
  BatchPlan p = sch.schedule(cache);
  EXPECT_EQ(p.kind, BatchPlan::Kind::kPrefill);
  EXPECT_EQ(p.new_seqs, 2);
  sch.on_step_done(p);
  for (auto& s : seqs) if (s->state() == RequestState::kDecoding) s->tokens.push_back(5);
  EXPECT_EQ(sch.num_queued(), 1);
  p = sch.schedule(cache);
  EXPECT_EQ(p.kind, BatchPlan::Kind::kDecode);  // queue is blocked by max_running
  EXPECT_EQ(p.items.size(), 2u);
}

TEST(Scheduler, PreemptsNewestWhenCacheIsFull) {
  CacheLayout l;
  l.pools.push_back({"kv", 8, 1, 16, PoolKind::kPaged, 0});
  KvCacheManager cache(l, 8 * 64, 4, 32);  // 64 tokens = 4 pages
  Scheduler sch({4, 1000});
  auto a = make_seq(1, 32), b = make_seq(2, 16);
  sch.enqueue(a.get());
  sch.enqueue(b.get());
  BatchPlan p = sch.schedule(cache);
  ASSERT_EQ(p.new_seqs, 2);
  sch.on_step_done(p);
  a->tokens.push_back(1);
  b->tokens.push_back(1);
  p = sch.schedule(cache);  // a needs a 3rd page, b a 2nd: only one fits, b goes back
  ASSERT_EQ(p.kind, BatchPlan::Kind::kDecode);
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].seq, a.get());
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(b->state(), RequestState::kQueued);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_EQ(sch.num_queued(), 1);
}

}  // namespace
}  // namespace dsv4::engine
