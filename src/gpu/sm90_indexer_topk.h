// Lightning indexer decode for CSA layers on sm_90a (spec §4.6, §5.4): bf16 index scores against
// every visible indexer key, fused with the top-k (k ≤ 512) selection on the GPU (no host sync;
// CUDA-graph capturable: no allocation, workspace from the caller).
//
// Row r (one query position of one sequence) reads q[r] (`heads` ≤ 64 heads, a multiple of 8,
// × 128 bf16, rotated and FP4-simulated; or the same values as fp32), weights[r] (heads
// bf16-valued floats, pre-scaled by 128^-0.5·heads^-0.5) and keys [0, visible[r]) of the row's
// key pool, bf16 [entries, 128] (FP4-simulated values are exact in bf16): keys +
// key_base[r]·128 (key_base null: one pool shared by every row, prefill), or, for GpuModel's
// batched decode, caches[r].index.keys with visible = (pos[r] + 1) / ratio.
// Score(w) = bf16(Σ_h bf16(ω_h · relu(bf16(q_h·K_w)))) with the head sum in fp32 in a fixed
// order (per lane in head order over its heads 8n + 2j + {0,1}, n = 0..7, then a 4-lane tree:
// (j0 + j1) + (j2 + j3); cpu::index_scores adds in head order: equal whenever the fp32 sums are
// exact, as they are in practice for FP4-simulated operands — so is the dot, an fp32
// tensor-core sum). The per-head term is computed as bf16x2 ops (cvt.rn.relu, mul.rn): the
// same value for finite dots, since ω_h · s is exact in fp32 for bf16 ω_h and s.
// Selection = cpu::select_topk: the top min(k, visible)
// ids by descending score, exact ties → lower id, written in that order; the rest of the k
// slots are −1. (−0 and +0 compare equal, as float comparison does.)
// Thread-safety: stateless; the caller owns every buffer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/decode_ops.h"

namespace dsv4::gpu::sm90 {

constexpr int kIndexHeads = 64;  // most index heads
constexpr int kIndexDim = 128;
constexpr int kIndexTopk = 512;  // largest k

struct IndexerArgs {
  const __nv_bfloat16* q = nullptr;  // [rows, heads, 128] (or q_f32)
  const float* q_f32 = nullptr;      // [rows, heads, 128] fp32 holding bf16 values
  int heads = kIndexHeads;           // 8..64, multiple of 8
  const float* weights = nullptr;    // [rows, heads]
  const __nv_bfloat16* keys = nullptr;  // key pool [*, 128] (without caches)
  const int64_t* key_base = nullptr;    // [rows] first key entry of the row's sequence, or null: 0
  const int32_t* visible = nullptr;     // [rows] visible entries (floor((t+1)/4)), or nullptr:
  const int32_t* pos = nullptr;         //   (pos[r] + 1) / ratio
  int ratio = 0;
  const DecodeLayerCache* caches = nullptr;  // [rows]: bf16 keys caches[r].index.keys instead
  int rows = 0;
  int max_visible = 0;  // host upper bound of visible[] (grid size, scratch stride)
  int k = kIndexTopk;   // 1..512
  int32_t* topk = nullptr;   // [rows, k] selected ids, −1 padded
  int32_t* count = nullptr;  // [rows] min(k, visible)
  bool scores_only = false;  // benchmarks: skip the selection kernel
};

// Scratch for one call: order-preserving 16-bit score keys [rows, stride] and a 256-bin
// histogram slice per score CTA (written whole by the scan, summed by the selection: the
// workspace needs no zeroing). Bytes grow with rows and max_visible, so a workspace sized for
// upper bounds serves every smaller call.
size_t indexer_workspace_bytes(int rows, int max_visible);

// Order-preserving key of a bf16 score (larger score → larger key) and its inverse, exposed
// for tests: key 0x8000 is ±0.
__host__ __device__ inline uint16_t score_key(uint16_t bf16_bits) {
  if (bf16_bits == 0x8000u) bf16_bits = 0;
  return (bf16_bits & 0x8000u) ? uint16_t(~bf16_bits) : uint16_t(bf16_bits | 0x8000u);
}
__host__ __device__ inline uint16_t score_from_key(uint16_t key) {
  return (key & 0x8000u) ? uint16_t(key & 0x7fffu) : uint16_t(~key);
}

// Scores + histogram kernel, then the selection kernel. workspace: indexer_workspace_bytes.
void indexer_topk(const IndexerArgs& args, void* workspace, cudaStream_t stream);

// Benchmarks: the same call, the selection kernel stamping its phases — clock64 ticks since its
// entry (rank 0's, for the cluster kernel) at: 0 grid dependency passed, 1 histogram slices
// summed, 2 high-byte threshold bin, 3 low-byte histogram, 4 threshold key, 5 keys above / at
// it counted, 6 picks in the list, 7 ordered (the cluster kernel: ordered and the ids written),
// 8 row written — into probe[rows][kSelectProbeSlots] (rows with visible ≤ k skip slots 1–5 in
// the cluster kernel, 2–5 in the one-CTA kernel).
constexpr int kSelectProbeSlots = 9;
void indexer_topk_probe(const IndexerArgs& args, void* workspace, long long* probe, cudaStream_t stream);

// Row stride (elements) of the score-key scratch: max_visible rounded up to 8.
__host__ __device__ inline int indexer_score_stride(int max_visible) { return (max_visible + 7) & ~7; }
// The score keys a call left in its workspace for row `row`.
inline const uint16_t* indexer_score_keys(const void* workspace, int row, int max_visible) {
  return static_cast<const uint16_t*>(workspace) + size_t(row) * size_t(indexer_score_stride(max_visible));
}

}  // namespace dsv4::gpu::sm90
