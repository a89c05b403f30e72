#include "engine/cache_manager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "base/check.h"

namespace dsv4::engine {
namespace {

CacheLayout v4_like_layout() {
  CacheLayout l;
  for (int layer = 0; layer < 3; ++layer) {
    const std::string p = "layer" + std::to_string(layer);
    l.pools.push_back({p + ".window", 64, 1, 16, PoolKind::kRing, 128});
    const int64_t ratio = layer == 1 ? 128 : 4;
    l.pools.push_back({p + ".compressed_kv", 64, ratio, 16, PoolKind::kPaged, 0});
    if (ratio == 4) {
      l.pools.push_back({p + ".indexer", 16, 4, 16, PoolKind::kPaged, 0});
      l.pools.push_back({p + ".compressor", 1024, 1, 1, PoolKind::kState, 8});
    } else {
      l.pools.push_back({p + ".compressor", 1024, 1, 1, PoolKind::kState, 128});
    }
  }
  l.pools.push_back({"mtp.window", 64, 1, 16, PoolKind::kRing, 128});
  return l;
}

std::vector<int64_t> free_counts(const KvCacheManager& m) {
  std::vector<int64_t> f;
  for (size_t i = 0; i < m.layout().pools.size(); ++i) f.push_back(m.free_pages(static_cast<int>(i)));
  return f;
}

TEST(KvCacheManager, SizesFromBudgetAndAdmits) {
  KvCacheManager m(v4_like_layout(), 8 << 20, 8, 1024);
  const CacheUsage u = m.usage();
  EXPECT_GE(u.max_sequences, 1);
  EXPECT_LE(u.total_bytes, 8 << 20);
  EXPECT_GE(u.token_capacity, 1024);
  EXPECT_TRUE(m.can_admit(1024));
  EXPECT_FALSE(m.can_admit(u.token_capacity * 4));
}

TEST(KvCacheManager, TooSmallBudgetThrows) {
  EXPECT_THROW(KvCacheManager(v4_like_layout(), 1000, 8, 1024), Error);
}

TEST(KvCacheManager, FreeCountsComeBackAfterRandomMix) {
  KvCacheManager m(v4_like_layout(), 16 << 20, 16, 2048);
  const auto start = free_counts(m);
  std::mt19937 rng(7);
  std::vector<SequenceId> live;
  SequenceId next = 1;
  for (int iter = 0; iter < 2000; ++iter) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 && m.can_admit(64)) {
      m.allocate(next);
      m.append(next, 1 + static_cast<int64_t>(rng() % 300));
      live.push_back(next++);
    } else if (op == 1 && !live.empty()) {
      const SequenceId s = live[rng() % live.size()];
      m.append(s, 1 + static_cast<int64_t>(rng() % 5));  // may fail when full; must not change state
    } else if (op >= 2 && !live.empty()) {  // finish or abort: both free every page
      const size_t k = rng() % live.size();
      m.free(live[k]);
      live.erase(live.begin() + static_cast<long>(k));
    }
  }
  for (SequenceId s : live) m.free(s);
  EXPECT_EQ(free_counts(m), start);
  EXPECT_EQ(m.num_sequences(), 0);
  EXPECT_EQ(m.usage().used_tokens, 0);
}

TEST(KvCacheManager, AppendFailsWithoutSideEffects) {
  KvCacheManager m(v4_like_layout(), 8 << 20, 2, 1024);
  m.allocate(1);
  const int64_t cap = m.usage().token_capacity;
  ASSERT_TRUE(m.append(1, cap - 3));
  const auto before = free_counts(m);
  EXPECT_FALSE(m.append(1, 1000));
  EXPECT_EQ(free_counts(m), before);
  EXPECT_EQ(m.table(1).num_tokens, cap - 3);
}

TEST(KvCacheManager, ExportImportRoundTripsByteIdentically) {
  KvCacheManager m(v4_like_layout(), 16 << 20, 8, 1024);
  m.allocate(1);
  ASSERT_TRUE(m.append(1, 700));
  const BlockTable& t = m.table(1);
  std::mt19937 rng(3);
  for (size_t pool = 0; pool < m.layout().pools.size(); ++pool) {
    const PoolSpec& s = m.layout().pools[pool];
    const int64_t entries = s.kind == PoolKind::kPaged ? (700 + s.tokens_per_entry - 1) / s.tokens_per_entry : s.ring_entries;
    for (int64_t e = 0; e < entries; ++e) {
      std::byte* p = m.entry(t, static_cast<int>(pool), e);
      for (int64_t b = 0; b < s.bytes_per_entry; ++b) p[b] = static_cast<std::byte>(rng());
    }
  }
  const SerializedState a = m.export_pages(1);
  m.import_pages(2, a);
  const SerializedState b = m.export_pages(2);
  EXPECT_EQ(a.num_tokens, b.num_tokens);
  EXPECT_EQ(a.pages, b.pages);
  // Appending several tokens at once (speculative verification) keeps working after import.
  EXPECT_TRUE(m.append(2, 4));
  m.free(1);
  m.free(2);
  EXPECT_EQ(m.num_sequences(), 0);
}

TEST(KvCacheManager, FreshPagesAreZeroed) {
  KvCacheManager m(v4_like_layout(), 8 << 20, 2, 1024);
  m.allocate(1);
  m.append(1, 8);
  std::memset(m.entry(m.table(1), 0, 3), 0xab, 64);
  m.free(1);
  m.allocate(2);
  m.append(2, 8);
  const std::byte* p = m.entry(m.table(2), 0, 3);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(p[i], std::byte{0});
}

TEST(KvCacheManager, ImportRejectsOtherLayouts) {
  KvCacheManager m(v4_like_layout(), 8 << 20, 4, 1024);
  m.allocate(1);
  m.append(1, 10);
  SerializedState s = m.export_pages(1);
  s.layout[0].bytes_per_entry = 32;
  EXPECT_THROW(m.import_pages(2, s), Error);
  EXPECT_FALSE(m.contains(2));
}

// The CUDA runner's layout: one fixed state slot per sequence whose bytes live on the device.
CacheLayout device_layout(int64_t slot_bytes, int64_t slots) {
  CacheLayout l;
  l.pools.push_back({.name = "cuda.sequence_state", .bytes_per_entry = slot_bytes, .tokens_per_entry = 1,
                     .entries_per_page = 1, .kind = PoolKind::kState, .ring_entries = 1, .device_resident = true});
  l.max_sequences = slots;
  l.byte_budget = slots * slot_bytes;
  return l;
}

TEST(KvCacheManager, DeviceResidentPoolAccountsWithoutHostBytes) {
  // 16 slots of 64 GiB: 1 TiB that could never be a host arena; only accounted.
  const int64_t slot = int64_t{64} << 30;
  const CacheLayout layout = device_layout(slot, 16);
  KvCacheManager m(layout, layout.byte_budget, 64, 65536);
  CacheUsage u = m.usage();
  EXPECT_EQ(u.max_sequences, 16);  // clamped to the runner's slots, not max_sequences=64
  EXPECT_EQ(u.total_bytes, 16 * slot);
  EXPECT_EQ(u.host_bytes, 0);
  EXPECT_TRUE(m.can_admit(65536));
  for (SequenceId s = 1; s <= 16; ++s) m.allocate(s);
  EXPECT_FALSE(m.can_admit(1));  // admission stops at the slot count
  EXPECT_THROW(m.allocate(17), Error);
  u = m.usage();
  EXPECT_EQ(u.used_sequences, 16);
  EXPECT_EQ(u.used_bytes, 16 * slot);
  EXPECT_THROW(m.entry(m.table(1), 0, 0), Error);  // no host bytes to address
  EXPECT_THROW(m.export_pages(1), Error);
  m.free(3);
  EXPECT_TRUE(m.can_admit(1));
  m.allocate(17);
  for (SequenceId s = 1; s <= 17; ++s) m.free(s);
  EXPECT_EQ(m.num_sequences(), 0);
  EXPECT_EQ(m.free_pages(0), 16);
  // The engine's smaller --max-running-requests wins over the runner's slot count.
  KvCacheManager few(layout, layout.byte_budget, 4, 65536);
  EXPECT_EQ(few.usage().max_sequences, 4);
}

TEST(KvCacheManager, HostPoolsStillAllocateArenas) {
  KvCacheManager m(v4_like_layout(), 8 << 20, 8, 1024);
  const CacheUsage u = m.usage();
  EXPECT_EQ(u.host_bytes, u.total_bytes);
  EXPECT_GT(u.host_bytes, 0);
}

}  // namespace
}  // namespace dsv4::engine
