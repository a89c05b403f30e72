// Lightning indexer decode for CSA layers on sm_90a (spec §4.6, §5.4): bf16 index scores against
// every visible indexer key, fused with the top-512 selection on the GPU (no host sync).
//
// Row r (one query position of one sequence) reads q[r] (64 heads × 128 bf16, rotated and
// FP4-simulated), weights[r] (64 bf16-valued floats, pre-scaled by 128^-0.5·64^-0.5) and keys
// key_base[r] + [0, visible[r]) of the key pool (bf16 [entries, 128]; FP4-simulated values are
// exact in bf16). Score(w) = bf16(Σ_h bf16(ω_h · relu(bf16(q_h·K_w)))) with the head sum in fp32
// in head order, as cpu::index_scores. Selection = cpu::select_topk: the top min(k, visible)
// ids by descending score, exact ties → lower id, written in that order; the rest of the k
// slots are −1. (−0 and +0 compare equal, as float comparison does.)
// Thread-safety: stateless; the caller owns every buffer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace dsv4::gpu::sm90 {

constexpr int kIndexHeads = 64;
constexpr int kIndexDim = 128;
constexpr int kIndexTopk = 512;

struct IndexerArgs {
  const __nv_bfloat16* q = nullptr;  // [rows, 64, 128]
  const float* weights = nullptr;    // [rows, 64]
  const __nv_bfloat16* keys = nullptr;  // key pool [*, 128]
  const int64_t* key_base = nullptr;    // [rows] first key entry of the row's sequence
  const int32_t* visible = nullptr;     // [rows] visible entries (floor((t+1)/4))
  int rows = 0;
  int max_visible = 0;  // host upper bound of visible[] (grid size, scratch stride)
  int32_t* topk = nullptr;   // [rows, 512] selected ids, −1 padded
  int32_t* count = nullptr;  // [rows] min(512, visible)
  bool scores_only = false;  // benchmarks: skip the selection kernel
};

// Scratch for one call: order-preserving 16-bit score keys [rows, stride] and a 256-bin
// histogram per row.
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

// Row stride (elements) of the score-key scratch: max_visible rounded up to 8.
__host__ __device__ inline int indexer_score_stride(int max_visible) { return (max_visible + 7) & ~7; }
// The score keys a call left in its workspace for row `row`.
inline const uint16_t* indexer_score_keys(const void* workspace, int row, int max_visible) {
  return static_cast<const uint16_t*>(workspace) + size_t(row) * size_t(indexer_score_stride(max_visible));
}

}  // namespace dsv4::gpu::sm90
