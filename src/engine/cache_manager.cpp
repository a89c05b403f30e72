#include "engine/cache_manager.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace dsv4::engine {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool is_fixed(const PoolSpec& s) { return s.kind != PoolKind::kPaged; }
}  // namespace

int64_t CacheLayout::fixed_bytes_per_sequence() const {
  int64_t total = 0;
  for (const auto& p : pools) {
    if (is_fixed(p)) total += ceil_div(p.ring_entries, p.entries_per_page) * p.entries_per_page * p.bytes_per_entry;
  }
  return total;
}

double CacheLayout::bytes_per_token() const {
  double total = 0;
  for (const auto& p : pools) {
    if (!is_fixed(p)) total += static_cast<double>(p.bytes_per_entry) / static_cast<double>(p.tokens_per_entry);
  }
  return total;
}

double CacheUsage::token_usage() const {
  double u = 0;
  for (const auto& [name, f] : pool_usage) u = std::max(u, f);
  return u;
}

KvCacheManager::KvCacheManager(CacheLayout layout, int64_t byte_budget, int64_t max_sequences,
                               int64_t max_context)
    : layout_(std::move(layout)) {
  DSV4_CHECK(byte_budget > 0, "cache byte budget must be positive, got ", byte_budget);
  DSV4_CHECK(max_sequences > 0, "max_sequences must be positive");
  for (const auto& s : layout_.pools) {
    DSV4_CHECK(s.bytes_per_entry > 0 && s.entries_per_page > 0 && s.tokens_per_entry > 0,
               "cache pool ", s.name, ": sizes must be positive");
    DSV4_CHECK(!is_fixed(s) || s.ring_entries > 0, "cache pool ", s.name, ": ring_entries must be positive");
  }
  const int64_t fixed = layout_.fixed_bytes_per_sequence();
  const double per_token = layout_.bytes_per_token();
  DSV4_CHECK(layout_.max_sequences >= 0, "cache layout: max_sequences must be >= 0");
  int64_t seqs = layout_.max_sequences > 0 ? std::min(max_sequences, layout_.max_sequences) : max_sequences;
  if (fixed > 0) {
    const int64_t fixed_share = per_token > 0 ? byte_budget / 2 : byte_budget;
    seqs = std::min(seqs, fixed_share / fixed);
    DSV4_CHECK(seqs >= 1, "cache budget of ", byte_budget, " bytes cannot hold one sequence's fixed state (",
               fixed, " bytes)");
  }
  const int64_t rest = byte_budget - seqs * fixed;
  const int64_t token_capacity = per_token > 0 ? static_cast<int64_t>(static_cast<double>(rest) / per_token) : 0;
  if (per_token > 0) {
    DSV4_CHECK(token_capacity >= max_context, "cache budget of ", byte_budget, " bytes holds ", token_capacity,
               " tokens, less than one sequence of max context ", max_context);
  }
  pools_.resize(layout_.pools.size());
  for (size_t i = 0; i < pools_.size(); ++i) {
    Pool& p = pools_[i];
    p.spec = layout_.pools[i];
    p.page_bytes = p.spec.bytes_per_entry * p.spec.entries_per_page;
    if (is_fixed(p.spec)) {
      p.num_pages = seqs * fixed_pages(p);
    } else {
      p.num_pages = token_capacity / (p.spec.tokens_per_entry * p.spec.entries_per_page);
    }
    DSV4_CHECK(p.num_pages < (int64_t{1} << 31), "cache pool ", p.spec.name, " has too many pages");
    if (!p.spec.device_resident) p.arena.resize(static_cast<size_t>(p.num_pages * p.page_bytes));
    p.free.reserve(static_cast<size_t>(p.num_pages));
    for (int64_t k = p.num_pages - 1; k >= 0; --k) p.free.push_back(static_cast<int32_t>(k));
  }
}

int64_t KvCacheManager::fixed_pages(const Pool& p) const {
  return ceil_div(p.spec.ring_entries, p.spec.entries_per_page);
}

int64_t KvCacheManager::pages_for_tokens(const Pool& p, int64_t tokens) const {
  // Entries are allocated for partial windows too, so the runner may stage them.
  return ceil_div(ceil_div(tokens, p.spec.tokens_per_entry), p.spec.entries_per_page);
}

bool KvCacheManager::can_admit(int64_t num_tokens) const {
  for (const Pool& p : pools_) {
    const int64_t need = is_fixed(p.spec) ? fixed_pages(p) : pages_for_tokens(p, num_tokens);
    if (need > static_cast<int64_t>(p.free.size())) return false;
  }
  return true;
}

int32_t KvCacheManager::take_page(int pool) {
  Pool& p = pools_[pool];
  DSV4_CHECK(!p.free.empty(), "cache pool ", p.spec.name, " is out of pages");
  const int32_t id = p.free.back();
  p.free.pop_back();
  if (!p.spec.device_resident) std::memset(page_ptr(pool, id), 0, static_cast<size_t>(p.page_bytes));
  return id;
}

void KvCacheManager::allocate(SequenceId seq) {
  DSV4_CHECK(!contains(seq), "sequence ", seq, " already has cache");
  DSV4_CHECK(can_admit(0), "no cache room for sequence ", seq);
  BlockTable t;
  t.seq = seq;
  t.pages.resize(pools_.size());
  for (size_t i = 0; i < pools_.size(); ++i) {
    if (!is_fixed(pools_[i].spec)) continue;
    const int64_t n = fixed_pages(pools_[i]);
    for (int64_t k = 0; k < n; ++k) t.pages[i].push_back(take_page(static_cast<int>(i)));
  }
  tables_.emplace(seq, std::move(t));
}

bool KvCacheManager::can_append(SequenceId seq, int64_t n) const {
  const auto it = tables_.find(seq);
  DSV4_CHECK(it != tables_.end(), "unknown sequence ", seq);
  const BlockTable& t = it->second;
  for (size_t i = 0; i < pools_.size(); ++i) {
    const Pool& p = pools_[i];
    if (is_fixed(p.spec)) continue;
    const int64_t need = pages_for_tokens(p, t.num_tokens + n) - static_cast<int64_t>(t.pages[i].size());
    if (need > static_cast<int64_t>(p.free.size())) return false;
  }
  return true;
}

bool KvCacheManager::append(SequenceId seq, int64_t n) {
  DSV4_CHECK(n >= 1, "append needs n >= 1");
  if (!can_append(seq, n)) return false;
  BlockTable& t = tables_.at(seq);
  for (size_t i = 0; i < pools_.size(); ++i) {
    const Pool& p = pools_[i];
    if (is_fixed(p.spec)) continue;
    const int64_t want = pages_for_tokens(p, t.num_tokens + n);
    while (static_cast<int64_t>(t.pages[i].size()) < want) t.pages[i].push_back(take_page(static_cast<int>(i)));
  }
  t.num_tokens += n;
  used_tokens_ += n;
  return true;
}

void KvCacheManager::free(SequenceId seq) {
  const auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (size_t i = 0; i < pools_.size(); ++i) {
    for (int32_t page : it->second.pages[i]) pools_[i].free.push_back(page);
  }
  used_tokens_ -= it->second.num_tokens;
  tables_.erase(it);
}

const BlockTable& KvCacheManager::table(SequenceId seq) const {
  const auto it = tables_.find(seq);
  DSV4_CHECK(it != tables_.end(), "unknown sequence ", seq);
  return it->second;
}

std::byte* KvCacheManager::page_ptr(int pool, int32_t page) {
  DSV4_CHECK(!pools_[pool].spec.device_resident, "cache pool ", pools_[pool].spec.name,
             " is device-resident: its bytes live in the runner, not in host memory");
  return pools_[pool].arena.data() + static_cast<int64_t>(page) * pools_[pool].page_bytes;
}
const std::byte* KvCacheManager::page_ptr(int pool, int32_t page) const {
  DSV4_CHECK(!pools_[pool].spec.device_resident, "cache pool ", pools_[pool].spec.name,
             " is device-resident: its bytes live in the runner, not in host memory");
  return pools_[pool].arena.data() + static_cast<int64_t>(page) * pools_[pool].page_bytes;
}

std::byte* KvCacheManager::entry(const BlockTable& table, int pool, int64_t entry_index) {
  DSV4_CHECK(pool >= 0 && pool < static_cast<int>(pools_.size()), "bad pool index ", pool);
  const Pool& p = pools_[pool];
  if (p.spec.kind == PoolKind::kRing) entry_index %= p.spec.ring_entries;
  DSV4_CHECK(entry_index >= 0, "negative entry index");
  const int64_t page = entry_index / p.spec.entries_per_page;
  DSV4_CHECK(page < static_cast<int64_t>(table.pages[pool].size()), "entry ", entry_index, " of pool ",
             p.spec.name, " is not backed by a page (sequence ", table.seq, ")");
  return page_ptr(pool, table.pages[pool][page]) + (entry_index % p.spec.entries_per_page) * p.spec.bytes_per_entry;
}

SerializedState KvCacheManager::export_pages(SequenceId seq) const {
  for (const Pool& p : pools_) {
    DSV4_CHECK(!p.spec.device_resident, "cannot export pool ", p.spec.name, ": it is device-resident");
  }
  const BlockTable& t = table(seq);
  SerializedState s;
  s.num_tokens = t.num_tokens;
  s.layout = layout_.pools;
  s.pages.resize(pools_.size());
  for (size_t i = 0; i < pools_.size(); ++i) {
    for (int32_t page : t.pages[i]) {
      const std::byte* src = page_ptr(static_cast<int>(i), page);
      s.pages[i].emplace_back(src, src + pools_[i].page_bytes);
    }
  }
  return s;
}

void KvCacheManager::import_pages(SequenceId seq, const SerializedState& state) {
  DSV4_CHECK(state.layout.size() == pools_.size(), "imported state has ", state.layout.size(),
             " pools, this cache has ", pools_.size());
  for (size_t i = 0; i < pools_.size(); ++i) {
    const PoolSpec& a = state.layout[i];
    const PoolSpec& b = pools_[i].spec;
    DSV4_CHECK(!b.device_resident, "cannot import into pool ", b.name, ": it is device-resident");
    DSV4_CHECK(a.bytes_per_entry == b.bytes_per_entry && a.entries_per_page == b.entries_per_page &&
                   a.tokens_per_entry == b.tokens_per_entry && a.kind == b.kind && a.ring_entries == b.ring_entries &&
                   a.device_resident == b.device_resident,
               "imported pool ", a.name, " does not match local pool ", b.name);
  }
  DSV4_CHECK(can_admit(state.num_tokens), "no cache room to import ", state.num_tokens, " tokens");
  allocate(seq);
  if (state.num_tokens > 0) append(seq, state.num_tokens);
  const BlockTable& t = tables_.at(seq);
  for (size_t i = 0; i < pools_.size(); ++i) {
    DSV4_CHECK(state.pages[i].size() == t.pages[i].size(), "imported pool ", pools_[i].spec.name, " has ",
               state.pages[i].size(), " pages, expected ", t.pages[i].size());
    for (size_t k = 0; k < t.pages[i].size(); ++k) {
      DSV4_CHECK(static_cast<int64_t>(state.pages[i][k].size()) == pools_[i].page_bytes, "bad page size");
      std::memcpy(page_ptr(static_cast<int>(i), t.pages[i][k]), state.pages[i][k].data(),
                  static_cast<size_t>(pools_[i].page_bytes));
    }
  }
}

CacheUsage KvCacheManager::usage() const {
  CacheUsage u;
  u.used_sequences = num_sequences();
  u.used_tokens = used_tokens_;
  for (const Pool& p : pools_) {
    const int64_t used = p.num_pages - static_cast<int64_t>(p.free.size());
    u.total_bytes += p.num_pages * p.page_bytes;
    u.host_bytes += static_cast<int64_t>(p.arena.size());
    u.used_bytes += used * p.page_bytes;
    if (is_fixed(p.spec)) {
      u.max_sequences = p.num_pages / std::max<int64_t>(1, fixed_pages(p));
    } else {
      const int64_t cap = p.num_pages * p.spec.entries_per_page * p.spec.tokens_per_entry;
      u.token_capacity = u.token_capacity == 0 ? cap : std::min(u.token_capacity, cap);
    }
    u.pool_usage.emplace_back(p.spec.name, p.num_pages ? static_cast<double>(used) / p.num_pages : 0.0);
  }
  return u;
}

}  // namespace dsv4::engine
