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
// are just several rows). Row r reads q[r] (64 heads × 512 bf16), then the candidate list
// main_idx[r][0 .. main_len[r]) (entry ids in main_pool, the window ring) followed by
// extra_idx[r][0 .. extra_len[r]) (entry ids in extra_pool: CSA top-k or all HCA entries);
// −1 ids are skipped. Output bf16 [rows, 64, 512] = Σ softmax(q·k·scale, sink) · k (K = V).
// Lengths are read on the device; the host only knows upper bounds (no host sync).
// Thread-safety: the functions are stateless; the caller owns every buffer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/kv_fp8.h"

namespace dsv4::gpu::sm90 {

constexpr int kHeads = 64;  // query heads per row (MQA: one KV head)
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
  const __nv_bfloat16* q = nullptr;  // [rows, 64, 512]
  KvPool main_pool;
  const int32_t* main_idx = nullptr;  // [rows, main_stride]
  const int32_t* main_len = nullptr;  // [rows]
  int main_stride = 0;
  KvPool extra_pool;                   // may be empty when extra_idx == nullptr
  const int32_t* extra_idx = nullptr;  // [rows, extra_stride] or nullptr (window-only layer)
  const int32_t* extra_len = nullptr;  // [rows]
  int extra_stride = 0;
  const float* sink = nullptr;  // [64]
  float scale = 0.044194173824159216f;  // 512^-0.5
  __nv_bfloat16* out = nullptr;  // [rows, 64, 512]
  int rows = 0;
};

// Work split, built on the host from upper bounds only; reusable across layers of one step
// with the same bounds. chunk: candidates per CTA (multiple of 16); splits: CTAs per row.
struct SparseDecodePlan {
  int rows = 0;
  int max_cands = 0;  // max_main + max_extra
  int chunk = 64;
  int splits = 1;
  size_t workspace_bytes = 0;  // partial (m, l, acc) per (row, split, head) when splits > 1
};

// num_sms: SMs to fill (132 on H200). min_chunk: smallest split (multiple of 16).
SparseDecodePlan plan_sparse_decode(int rows, int max_main, int max_extra, int num_sms,
                                    int min_chunk = 16);

// Runs the split-K kernel and, when plan.splits > 1, the merge kernel. workspace: at least
// plan.workspace_bytes of device memory.
void sparse_decode(const SparseDecodeArgs& args, const SparseDecodePlan& plan, void* workspace,
                   cudaStream_t stream);

}  // namespace dsv4::gpu::sm90
