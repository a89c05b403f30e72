// Launcher API of the sm_90a split-K sparse decode attention (spec §4.4, §5.3, §5.4) and of the
// 584-byte FP8 KV pool it reads.
//
// KV pool: the 584-byte FP8 layout of kv_fp8.h (pages of `page_size` entries; an entry id e
// is page e / page_size, slot e % page_size — the block table is folded into the ids, as in
// FlashMLA). Dequantized values e4m3 · 2^(E8M0 − 127) equal the reference's Q8-simulated bf16
// values exactly (kv_cache_insert stores the Q8 simulation with the reference clamp: amax
// floored at 1e-4 before /448). GpuModel's caches are such pools (kv_cache_pool()).
//
// Attention rows: one row = one query position of one sequence (several positions per sequence
// are just several rows). Row r reads q[r] (`heads` ≤ 64 heads × 512, padded to 16-head MMA
// tiles whose extra rows are masked), then the candidate list main[r][0 .. main_len[r])
// followed by extra[r][0 .. extra_len[r]); −1 ids are skipped. Output [rows, heads, 512] =
// Σ softmax(q·k·scale, sink) · k (K = V), bf16-rounded.
// Lists: explicit (main_idx / extra_idx: entry ids in main_pool / extra_pool) or, for
// GpuModel's batched decode, implicit from the row's position pos[r]: main = the window ring,
// min(pos+1, win) entries (first + j) % win with first = max(0, pos − win + 1) (ascending
// positions); extra = the compressed entries 0 .. (pos+1)/extra_ratio (HCA) when extra_idx is
// null and extra_ratio > 0. Prefill (GpuModel::forward, one sequence) keeps the implicit
// window list but reads it from a linear pool (window_origin ≥ 0: position p is entry
// p − window_origin of main_pool) that holds the chunk's new rows too. With `caches`, row r's
// pools are its own buffers
// (caches[r].window, caches[r].comp.cache) in the main_pool / extra_pool page layout.
// Lengths are read on the device; the host only knows upper bounds (no host sync; CUDA-graph
// capturable: no allocation, workspace from the caller).
// Thread-safety: the functions are stateless; the caller owns every buffer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/decode_ops.h"
#include "gpu/kv_fp8.h"

namespace dsv4::gpu::sm90 {

constexpr int kHeads = 64;  // most query heads per row (MQA: one KV head)
// Split plan constants (plan_sparse_decode): candidates per kernel tile, most splits per row
// (the merge kernel's weight table), largest cluster (16 is a non-portable size) and most
// candidates per CTA for which the in-cluster merge is chosen over more splits.
constexpr int kSplitTile = 64;
constexpr int kMaxSplits = 256;
constexpr int kMaxCluster = 16;
constexpr int kClusterMaxChunk = 128;
// Fewest rows (split_rows) for which the plan picks the warp-specialized kernel.
constexpr int kWsMinRows = 16;
// The layout (kv_fp8.h) under this file's historical names.
constexpr int kHeadDim = kKvDim;
constexpr int kNopeDim = kKvNopeDim;
constexpr int kRopeDim = kKvRopeDim;
constexpr int kEntryData = kKvEntryData;
constexpr int kEntryScales = kKvEntryScales;
constexpr int kEntryBytes = kKvEntryBytes;
using gpu::KvPool;
using gpu::kv_data_offset;
using gpu::kv_page_stride;
using gpu::kv_pool_bytes;
using gpu::kv_scale_offset;

// Cache insert: quantizes kv[i] (512 bf16-valued floats: post-norm, post-RoPE) into entry
// slots[i] of the pool (slots[i] = −1: skipped). kv: [n, 512] fp32 holding bf16 values.
void kv_cache_insert(const float* kv, const int32_t* slots, int64_t n, const KvPool& pool,
                     cudaStream_t stream);

struct SparseDecodeArgs {
  const __nv_bfloat16* q = nullptr;  // [rows, heads, 512] (or q_f32)
  const float* q_f32 = nullptr;      // [rows, heads, 512] fp32 holding bf16 values
  int heads = kHeads;                // 1..64
  KvPool main_pool;
  const int32_t* main_idx = nullptr;  // [rows, main_stride], or nullptr: ring window (pos, win)
  const int32_t* main_len = nullptr;  // [rows]
  int main_stride = 0;
  KvPool extra_pool;                   // may be empty when there is no extra list
  const int32_t* extra_idx = nullptr;  // [rows, extra_stride] or nullptr (HCA / window-only)
  const int32_t* extra_len = nullptr;  // [rows]
  int extra_stride = 0;
  // Implicit lists and per-row buffers (GpuModel decode; see the file comment).
  const int32_t* pos = nullptr;              // [rows] position of the row's query
  int win = 0;                               // ring size (main_idx == nullptr)
  int window_origin = -1;                    // ≥ 0: linear window pool (see above), else a ring
  int extra_ratio = 0;                       // > 0: HCA list (extra_idx == nullptr)
  const DecodeLayerCache* caches = nullptr;  // [rows] per-row pool bases, or nullptr
  const float* sink = nullptr;  // [heads]
  float scale = 0.044194173824159216f;  // 512^-0.5
  __nv_bfloat16* out = nullptr;  // [rows, heads, 512] (or out_f32)
  float* out_f32 = nullptr;      // [rows, heads, 512] fp32 holding bf16 values
  int rows = 0;
};

// Work split, built on the host from upper bounds only; reusable across layers of one step
// with the same bounds. splits: CTAs per row. Each row splits its own candidate count over
// them on the device: chunk_r = max(min_chunk, round_up(ceil(total_r / splits), chunk_align))
// (chunk_align 8 with the in-cluster merge, else 16), for the merge kernel rounded to whole
// 64-candidate tiles above 64; CTAs past the row's end only mark
// their partial empty. Merge of the splits' partials: cluster > 1
// (= splits, a power of two ≤ 16): in the kernel, through distributed shared memory of the
// row's thread-block cluster (one launch, no workspace); cluster == 1 and splits > 1: fp32
// partials in the workspace and a merge kernel (long lists, > 128 candidates per CTA).
// The result of a row depends only on its inputs, `splits`, `cluster` and `min_chunk` (head
// groups only change which CTA runs a head's identical arithmetic) — so a
// CUDA graph of padded rows reproduces eager decode bit for bit when both plan with the same
// split_rows (and max_cluster).
struct SparseDecodePlan {
  int rows = 0;
  int heads = kHeads;
  int max_main = 0;   // list bounds (the kernel loads a full row's first ids with its
  int max_extra = 0;  // lengths, speculatively; the result does not depend on them)
  int max_cands = 0;  // max_main + max_extra
  int chunk = 64;     // chunk of a row with max_cands candidates (information)
  int min_chunk = 16;
  int chunk_align = 16;  // 8 with the in-cluster merge, else 16 (see chunk_r)
  int splits = 1;
  int cluster = 1;             // CTAs per thread-block cluster (in-kernel merge when > 1)
  int head_groups = 1;         // CTAs per (row, split) along the heads, group_tiles 16-head tiles each
  int group_tiles = 4;
  // The warp-specialized wgmma kernel (sm90_sparse_decode_ws.cu) instead of the mma.sync one:
  // split_rows ≥ kWsMinRows (then one head group and clusters ≤ 8). Same results contract.
  bool warp_specialized = false;
  size_t workspace_bytes = 0;  // partial (m, l, acc) per (row, split, head) for the merge kernel
};

// num_sms: SMs to fill (132 on H200). min_chunk: smallest split (multiple of 16). split_rows
// (≥ rows; 0 = rows): the row count the split count is chosen for: s = min(ceil(max_cands /
// min_chunk), ceil(num_sms / split_rows), 256); s ≤ max_cluster: splits = cluster = the
// largest power of two ≤ s; else if max_cluster ≥ 2 and (2·max_cluster ≥ s or
// ceil(max_cands / max_cluster) ≤ 128): splits = cluster = max_cluster; else splits = s,
// cluster = 1 (merge kernel). max_cluster: 0 = the device's
// limit for split_rows clusters (sparse_decode_cluster_limit); 1 = never cluster.
// head_groups (cluster merge or one split only): the row's 16-head tiles split over that many
// CTAs (each gathers the same candidates for fewer heads: shorter tensor-core phases and
// partials at small batch); 0 = 4 or 2 when split_rows · groups · splits ≤ num_sms (and, with
// max_cluster 0, the device holds those clusters at once), else 1. warp_specialized: split_rows
// ≥ kWsMinRows and cluster ≤ 8 (head groups are then 1).
SparseDecodePlan plan_sparse_decode(int rows, int max_main, int max_extra, int num_sms,
                                    int min_chunk = 16, int heads = kHeads, int split_rows = 0,
                                    int max_cluster = 0, int head_groups = 0);
// Clusters of `cluster` CTAs (1, 2, 4, 8, 16; 16 is a non-portable size) of the kernel that the
// current device runs at once (cudaOccupancyMaxActiveClusters; 0: none or another size);
// cached per device. The limit for split_rows rows: the largest of 16, 8, 4 whose capacity
// holds one cluster per row (one wave), else 2. Thread-safe.
int sparse_decode_cluster_capacity(int cluster);
int sparse_decode_cluster_limit(int split_rows);
// Upper bound of plan_sparse_decode(rows' ≤ split_rows, ..., split_rows).workspace_bytes for
// every row count and candidate bound: (num_sms + split_rows) partial units.
size_t sparse_decode_workspace_bound(int split_rows, int heads, int num_sms);

// Runs the split-K kernel (with its in-cluster merge when plan.cluster > 1) and, when
// plan.splits > 1 and plan.cluster == 1, the merge kernel. workspace: at least
// plan.workspace_bytes of device memory. The split kernel is launched with programmatic
// dependent launch inside a PdlScope (pdl.h) unless the merge kernel follows (measured slower);
// the kernels wait for their predecessor before reading any input.
void sparse_decode(const SparseDecodeArgs& args, const SparseDecodePlan& plan, void* workspace,
                   cudaStream_t stream);

// Benchmark hook: sparse_decode with a per-phase clock64 probe (another instantiation; plans
// with the in-cluster merge only). probe: device [CTAs][kSparseDecodeProbeSlots] int64: slots
// 0..12 clock64 at kernel entry, after pdl_wait, after the first tile's ids, its data, dequant,
// QK, softmax, P·V, the loop, the first cluster barrier, the merge weights, the output, the last
// barrier; 13 / 14 globaltimer (ns) at entry / exit, 15 clock64 at exit. A warp-specialized plan
// runs that kernel's probe instead, whose slots 1..12 differ and whose slots 16..22 hold its
// steady-state sums (sm90_sparse_decode_ws.cu).
constexpr int kSparseDecodeProbeSlots = 24;
void sparse_decode_probe(const SparseDecodeArgs& args, const SparseDecodePlan& plan, void* workspace,
                         long long* probe, cudaStream_t stream);

}  // namespace dsv4::gpu::sm90
