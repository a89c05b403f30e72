// Host launchers of the batched-decode kernels (decode_kernels.cu): one new token per row,
// each row a different sequence at its own position. Positions and per-sequence cache
// pointers are read from DEVICE arrays, and every grid is sized from host upper bounds only,
// so a captured CUDA graph stays valid while the sequences grow (graph-capturable: no host
// sync, no allocation). Each kernel runs, per row, the same arithmetic in the same order as
// its host-position counterpart in ops.h with n = 1 and start_pos = pos[row] (bit-identical).
// Activations are fp32 arrays holding bf16 values, as in ops.h. The window ring and the
// compressed entries are FP8 cache buffers (kv_fp8.h), as in ops.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::gpu {

// One compressor's per-sequence device state (GpuLayerCache: comp_* or index_*).
struct DecodeCompressorCache {
  float* state_kv = nullptr;     // [slots, width]
  float* state_score = nullptr;  // [slots, width]
  float* keys = nullptr;         // indexer: [max_len / ratio, h] fp32 keys
  uint8_t* cache = nullptr;      // attention: max_len / ratio entries, FP8 cache (kv_fp8.h)
};

// Device pointers of one sequence's cache for one layer (a row of the per-layer table).
struct DecodeLayerCache {
  uint8_t* window = nullptr;   // win entries, FP8 cache (kv_fp8.h)
  DecodeCompressorCache comp;  // attention compressor (ratio > 0)
  DecodeCompressorCache index; // indexer compressor (CSA layers)
};

// RoPE like rope_rows, with row i at position pos[i / rows_per_pos] (pos: device [rows /
// rows_per_pos]).
void decode_rope_rows(float* x, int64_t rows, int64_t stride, int64_t rows_per_pos, const int32_t* pos,
                      const float* table, int pairs, bool inverse, cudaStream_t s);

// compressor_step for one token per row (kv/score projections [rows, width]) on the state of
// caches[row].comp (indexer = false) or .index (indexer = true), fused with compressor_finish
// of the entry it emits iff (pos[row] + 1) % ratio == 0.
struct DecodeCompressorArgs {
  const float* kv = nullptr;     // [rows, width]
  const float* score = nullptr;  // [rows, width]
  const float* ape = nullptr;    // [ratio, width]
  const float* norm = nullptr;   // [h]
  const float* rope_table = nullptr;
  int pairs = 0;
  float eps = 0;
  int ratio = 0, h = 0;
  bool overlap = false, indexer = false;
};
void decode_compressor(const DecodeCompressorArgs& a, int64_t rows, const int32_t* pos,
                       const DecodeLayerCache* caches, cudaStream_t s);

// index_scores + index_topk per row: keys caches[row].index.keys, visible = (pos+1)/ratio.
// q [rows, heads, dh]; weights [rows, heads]; scores [rows, score_stride] (score_stride ≥
// max_visible); sel [rows, k]; count [rows]. max_visible: host upper bound of every row's
// visible count (e.g. max_len / ratio).
void decode_index_topk(const float* q, const float* weights, int64_t rows, const int32_t* pos,
                       const DecodeLayerCache* caches, int ratio, int heads, int dh, int64_t max_visible,
                       float* scores, int64_t score_stride, int k, int32_t* sel, int32_t* count, cudaStream_t s);

// sparse_attention per row with window_len = win (decode), ring caches[row].window and
// compressed caches[row].comp.cache. q/out [rows, H, d]; kv_new [rows, d]; selected [rows,
// sel_stride] + sel_count [rows] for CSA (null: HCA / window-only).
struct DecodeAttnArgs {
  const float* q = nullptr;
  const float* kv_new = nullptr;
  const int32_t* selected = nullptr;
  const int32_t* sel_count = nullptr;
  int sel_stride = 0;
  const float* sink = nullptr;  // [H]
  float scale = 0;
  int H = 0, d = 0, win = 0, ratio = 0;
  float* out = nullptr;
};
void decode_sparse_attention(const DecodeAttnArgs& a, int64_t rows, const int32_t* pos,
                             const DecodeLayerCache* caches, cudaStream_t s);

// Entry pos[row] % win of caches[row].window = encode(kv[row]) (kv [rows, d], Q8-simulated:
// stored exactly).
void decode_ring_update(const float* kv, int64_t rows, const int32_t* pos, const DecodeLayerCache* caches, int win,
                        int d, cudaStream_t s);

}  // namespace dsv4::gpu
