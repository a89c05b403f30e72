// KvCacheManager: byte arenas and page tables for every per-sequence state DeepSeek-V4
// needs (dsv4-spec.md §5.1): per layer the 128-token window ring, paged compressed KV for
// the ratio-4 (CSA) and ratio-128 (HCA) layers, the indexer key pool, fixed-size
// compressor states and the MTP window.
//
// A CacheLayout lists pools. Each pool has its own page allocator over one host arena:
//   kRing  : ring_entries entries per sequence (slot = pos mod ring_entries), allocated
//            when the sequence is created;
//   kPaged : one entry per tokens_per_entry tokens, pages added as the sequence grows;
//   kState : ring_entries fixed entries per sequence (compressor state), allocated at creation.
// Pages are zeroed when handed out, so a fresh sequence starts from zeroed state.
// A device-resident pool (PoolSpec::device_resident) is accounting only: its pages and
// tables are tracked for admission exactly like a host pool's, but its bytes live in the
// runner's device memory (GpuRunner's state pool), so no host arena is allocated and
// entry() / export_pages() / import_pages() refuse it.
//
// Thread-safety: none; only the engine thread uses it (usage() snapshots are plain values).
// Ownership: the manager owns the arenas and every BlockTable; pointers from entry() stay
// valid until the sequence is freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/types.h"

namespace dsv4::engine {

enum class PoolKind : uint8_t { kRing, kPaged, kState };

struct PoolSpec {
  std::string name;              // e.g. "layer3.window", "layer3.csa_kv", "layer3.indexer"
  int64_t bytes_per_entry = 0;   // > 0
  int64_t tokens_per_entry = 1;  // 1 for window/state, the compression ratio for paged KV
  int64_t entries_per_page = 1;  // > 0
  PoolKind kind = PoolKind::kPaged;
  int64_t ring_entries = 0;      // kRing: ring size (128); kState: entries per sequence
  bool device_resident = false;  // bytes kept by the runner on its device: account only
};

struct CacheLayout {
  std::vector<PoolSpec> pools;
  // > 0: the runner holds at most this many sequences (e.g. its device state slots); the
  // manager's fixed pools and the engine's max_running_requests are clamped to it.
  int64_t max_sequences = 0;
  // > 0: the runner sized its pools itself (device memory planner, --mem-fraction-static);
  // the engine passes this budget instead of --cpu-cache-bytes.
  int64_t byte_budget = 0;
  // Bytes one sequence needs independent of its length (rings + states).
  int64_t fixed_bytes_per_sequence() const;
  // Average bytes per token of the growing pools.
  double bytes_per_token() const;
};

// Pages of one sequence, per pool (index = pool index in the layout).
struct BlockTable {
  SequenceId seq = 0;
  int64_t num_tokens = 0;                  // tokens covered by the kPaged pools
  std::vector<std::vector<int32_t>> pages;  // [pool][page_index] -> page id in that pool
};

// A sequence's complete state, page by page, for export to another engine (PD
// disaggregation). Byte-identical after export -> import -> export.
struct SerializedState {
  int64_t num_tokens = 0;
  std::vector<PoolSpec> layout;                     // checked on import
  std::vector<std::vector<std::vector<std::byte>>> pages;  // [pool][page] -> page bytes
};

struct CacheUsage {
  int64_t total_bytes = 0;
  int64_t used_bytes = 0;
  int64_t host_bytes = 0;     // of total_bytes, allocated in host arenas (0: all device-resident)
  int64_t max_sequences = 0;  // fixed-pool capacity
  int64_t used_sequences = 0;
  int64_t token_capacity = 0;  // tokens the growing pools hold in total
  int64_t used_tokens = 0;     // sum of num_tokens over sequences
  std::vector<std::pair<std::string, double>> pool_usage;  // name -> used page fraction
  double token_usage() const;  // max over pools of used fraction (0 when no pools)
};

class KvCacheManager {
 public:
  // Sizes the arenas from byte_budget: fixed pools get `max_sequences` sequence slots
  // (at most layout.max_sequences when set; reduced to use at most half the budget), the
  // growing pools share the rest so each holds the same number of tokens (at least
  // max_context tokens when possible). Device-resident pools get no host arena.
  // Throws dsv4::Error when not even one sequence of max_context tokens fits.
  KvCacheManager(CacheLayout layout, int64_t byte_budget, int64_t max_sequences,
                 int64_t max_context);

  const CacheLayout& layout() const { return layout_; }

  // True when a new sequence of num_tokens would get its fixed pools and the pages.
  bool can_admit(int64_t num_tokens) const;
  // Creates seq with zero tokens (fixed pools allocated). Throws if seq exists or no room.
  void allocate(SequenceId seq);
  bool contains(SequenceId seq) const { return tables_.count(seq) != 0; }
  // True when seq can grow by n tokens.
  bool can_append(SequenceId seq, int64_t n) const;
  // Grows seq by n >= 1 tokens (several for speculative decoding); false, nothing changed,
  // when pages are missing.
  bool append(SequenceId seq, int64_t n);
  // Returns every page of seq. No-op for unknown seq.
  void free(SequenceId seq);

  const BlockTable& table(SequenceId seq) const;
  // Address of one entry: for kRing entry_index is reduced mod ring_entries; for kPaged it
  // is the compressed entry index (pos / tokens_per_entry) and must be backed by a page.
  std::byte* entry(const BlockTable& table, int pool, int64_t entry_index);

  SerializedState export_pages(SequenceId seq) const;
  // Creates seq from an exported state (layouts must match). Throws when out of room.
  void import_pages(SequenceId seq, const SerializedState& state);

  int64_t free_pages(int pool) const { return static_cast<int64_t>(pools_[pool].free.size()); }
  int64_t total_pages(int pool) const { return pools_[pool].num_pages; }
  int64_t num_sequences() const { return static_cast<int64_t>(tables_.size()); }
  CacheUsage usage() const;

 private:
  struct Pool {
    PoolSpec spec;
    int64_t num_pages = 0;
    int64_t page_bytes = 0;
    std::vector<std::byte> arena;  // num_pages * page_bytes (empty when device-resident)
    std::vector<int32_t> free;     // stack of free page ids
  };
  int64_t pages_for_tokens(const Pool& p, int64_t tokens) const;
  int64_t fixed_pages(const Pool& p) const;
  std::byte* page_ptr(int pool, int32_t page);
  const std::byte* page_ptr(int pool, int32_t page) const;
  int32_t take_page(int pool);

  CacheLayout layout_;
  std::vector<Pool> pools_;
  std::unordered_map<SequenceId, BlockTable> tables_;
  int64_t used_tokens_ = 0;
};

}  // namespace dsv4::engine
