// Row-level pieces shared by both sm_90a sparse decode attention kernels (the mma.sync one,
// sm90_sparse_decode.cu, and the warp-specialized one, sm90_sparse_decode_ws.cu): the row's list
// and its entry addresses, the speculative id load, the split chunk, the probe stamps.
// Part of each kernel's translation unit: included once, inside its anonymous namespace, after
// its constants (kTile) and Smem (the probe writes sm.stamp) — not a standalone header.
#pragma once

// The row's list: lengths and pool bases (per-row buffers in decode mode).
struct RowList {
  int main_len, total, first;
  const uint8_t* main_base;
  const uint8_t* extra_base;
};

__device__ __forceinline__ RowList row_list(const SparseDecodeArgs& a, int r) {
  RowList l;
  const int pos = a.pos != nullptr ? a.pos[r] : 0;
  l.main_len = a.main_idx != nullptr ? a.main_len[r] : min(pos + 1, a.win);
  l.first = max(0, pos - a.win + 1);
  int extra = 0;
  if (a.extra_idx != nullptr)
    extra = a.extra_len[r];
  else if (a.extra_ratio > 0)
    extra = (pos + 1) / a.extra_ratio;
  l.total = l.main_len + extra;
  l.main_base = a.caches != nullptr ? a.caches[r].window : a.main_pool.base;
  l.extra_base = a.caches != nullptr ? a.caches[r].comp.cache : a.extra_pool.base;
  return l;
}

// Resolves list position j of row r to the entry's data/scale addresses (nullptr: invalid).
// use_pre: `pre` is the explicit list's id at j, loaded earlier (spec_list_id).
__device__ __forceinline__ void resolve(const SparseDecodeArgs& a, const RowList& rl, int r, int j,
                                        const uint8_t*& data, const uint8_t*& sc, bool use_pre = false,
                                        int32_t pre = -1) {
  data = nullptr;
  sc = nullptr;
  if (j >= rl.total) return;
  const KvPool* pool;
  const uint8_t* base;
  int32_t id;
  if (j < rl.main_len) {
    pool = &a.main_pool;
    base = rl.main_base;
    id = a.main_idx != nullptr     ? (use_pre ? pre : a.main_idx[int64_t(r) * a.main_stride + j])
         : a.window_origin >= 0 ? rl.first + j - a.window_origin
                                : (rl.first + j) % a.win;
  } else {
    pool = &a.extra_pool;
    base = rl.extra_base;
    const int c = j - rl.main_len;
    id = a.extra_idx == nullptr ? c : use_pre ? pre : a.extra_idx[int64_t(r) * a.extra_stride + c];
  }
  if (id < 0) return;
  // kv_data_offset / kv_scale_offset in 32-bit arithmetic (id ≥ 0), a shift for power-of-two
  // pages: the same addresses without a 64-bit division.
  const uint32_t ps = uint32_t(pool->page_size), u = uint32_t(id);
  uint32_t page, slot;
  if ((ps & (ps - 1)) == 0) {
    page = u >> (__ffs(int(ps)) - 1);
    slot = u & (ps - 1);
  } else {
    page = u / ps;
    slot = u - page * ps;
  }
  const uint8_t* pg = base + int64_t(page) * pool->page_stride;
  data = pg + slot * kEntryData;
  sc = pg + ps * kEntryData + slot * kEntryScales;
}

// Speculative id load (before the row's lengths are known): the explicit list's id at list
// position j of row r, assuming main_len == spec_main (in range of the row's index buffers;
// the value is used only when the row's lengths turn out to be the plan's bounds).
__device__ __forceinline__ int32_t spec_list_id(const SparseDecodeArgs& a, int r, int j, int spec_main) {
  if (j < spec_main)
    return a.main_idx != nullptr && j < a.main_stride ? a.main_idx[int64_t(r) * a.main_stride + j] : -1;
  const int c = j - spec_main;
  return a.extra_idx != nullptr && c < a.extra_stride ? a.extra_idx[int64_t(r) * a.extra_stride + c] : -1;
}

// Per-phase probe (bench-only instantiation kProbe): thread `by` stamps clock64 into slot i
// (slot 0 also the globaltimer into slot 13); `after` (e.g. a loaded value) is there first.
__device__ __forceinline__ long long globaltimer_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
template <bool kProbe>
__device__ __forceinline__ void probe_mark(Smem& sm, int i, int by = 0, int after = 0) {
  if constexpr (kProbe)
    if (int(threadIdx.x) == by) {
      asm volatile("" ::"r"(after));
      sm.stamp[i] = clock64();
      if (i == 0) sm.stamp[13] = globaltimer_ns();
    }
}
// The CTA's stamps into its probe row (one thread, after the last stamp): slots 0..13, the
// globaltimer and clock64 at exit (14, 15), then the kernel's own slots 16.. (kProbeSlots; the ws
// kernel's steady-state sums). Rows are kSparseDecodeProbeSlots apart.
__device__ __forceinline__ void probe_write(const Smem& sm, long long* probe) {
  static_assert(kProbeSlots >= 16 && kProbeSlots <= kSparseDecodeProbeSlots, "a probe row holds the slots");
  long long* out = probe + int64_t(blockIdx.x) * kSparseDecodeProbeSlots;
  for (int i = 0; i < 14; ++i) out[i] = sm.stamp[i];
  out[14] = globaltimer_ns();
  out[15] = clock64();
  for (int i = 16; i < kProbeSlots; ++i) out[i] = sm.stamp[i];
}

// Candidates per split of a row with `total` candidates (SparseDecodePlan): a multiple of 8
// with the in-cluster merge (plan.chunk_align), of 16 (64 above 64) with the merge kernel.
__device__ __forceinline__ int row_chunk(int total, int splits, int min_chunk, bool cluster_merge) {
  const int a = cluster_merge ? 8 : 16;
  int chunk = ((total + splits - 1) / splits + a - 1) & -a;
  if (!cluster_merge && chunk > kTile) chunk = (chunk + kTile - 1) & ~(kTile - 1);
  return max(chunk, min_chunk);
}

