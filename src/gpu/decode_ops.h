// Host launchers of the batched-decode kernels (decode_kernels.cu): one new token per row,
// each row a different sequence at its own position. Positions and per-sequence cache
// pointers are read from DEVICE arrays, and every grid is sized from host upper bounds only,
// so a captured CUDA graph stays valid while the sequences grow (graph-capturable: no host
// sync, no allocation). Each kernel runs, per row, the same arithmetic in the same order as
// its host-position counterpart in ops.h with n = 1 and start_pos = pos[row] (bit-identical).
// Activations are fp32 arrays holding bf16 values, as in ops.h. The window ring and the
// compressed entries are FP8 cache buffers (kv_fp8.h), as in ops.h.
// The CSA indexer and the sparse attention have a second implementation on sm_90a tensor
// cores (sparse_decode.h, sm90_indexer_topk.h: tolerance-equal, not bitwise); decode_index /
// decode_attend at the end of this file are the one dispatch point between the two.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::gpu {

// One compressor's per-sequence device state (GpuLayerCache: comp_* or index_*).
struct DecodeCompressorCache {
  float* state_kv = nullptr;     // [slots, width]
  float* state_score = nullptr;  // [slots, width]
  uint16_t* keys = nullptr;      // indexer: [max_len / ratio, h] keys, bf16 bits (exact)
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

// The attention output's inverse RoPE before wo_a, and its bf16 copy for dense_linear_fp8:
// x [rows, H·d] (head h at h·d, rotary part the last 2·pairs values of each head) is rotated in
// place as decode_rope_rows(x, rows·H, d, H, pos, table, pairs, true) does (same bits); x16
// [rows, H·d] holds the bf16 bits of x and exact [rows, ceil(H·d / kBf16CopyFlagValues)] (ops.h)
// is 1 where every value of the block is a bf16 value (always, for the attention's rounded
// output), else 0: dense_linear_fp8's x16 / x16_exact. d % 4 == 0, pairs even, 16-byte aligned
// x / x16.
void decode_rope_inverse_bf16(float* x, int64_t rows, int H, int d, const int32_t* pos, const float* table, int pairs,
                             uint16_t* x16, int32_t* exact, cudaStream_t s);

// norm_rope_simulate_q8_rows (ops.h) on the window-KV rows at their positions pos[row], and
// decode_ring_update of the result in the same launch (same bits in y and in the ring). dim ==
// kKvDim. For the sm_90a decode path, whose attention reads the ring after the update.
void decode_kv_rows_to_ring(const float* x, const float* w, int64_t rows, int dim, float eps, const float* table,
                            int pairs, const int32_t* pos, int block, float* y, const DecodeLayerCache* caches, int win,
                            cudaStream_t s);

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
  bool ring_written = false;  // the window rings already hold kv_new (decode_kv_rows_to_ring; sm_90a path)
};
void decode_sparse_attention(const DecodeAttnArgs& a, int64_t rows, const int32_t* pos,
                             const DecodeLayerCache* caches, cudaStream_t s);

// Entry pos[row] % win of caches[row].window = encode(kv[row]) (kv [rows, d], Q8-simulated:
// stored exactly).
void decode_ring_update(const float* kv, int64_t rows, const int32_t* pos, const DecodeLayerCache* caches, int win,
                        int d, cudaStream_t s);

// pos[i] = first + i for i < n: device positions of one sequence's consecutive rows (prefill
// through the per-row sm_90a kernels).
void fill_positions(int32_t* pos, int64_t n, int64_t first, cudaStream_t s);

// ---- Dispatch: the plain kernels above or the sm_90a ones --------------------------------
enum class DecodeAttnPath { kPlain, kSm90 };
// kSm90 on a compute capability 9.0 device when the shapes fit the sm_90a kernels (heads ≤ 64,
// index heads a multiple of 8 ≤ 64, index head dim 128, top-k ≤ 512) and DSV4_GPU_ATTN is not
// "reference"; else kPlain. Chosen once per model at load.
DecodeAttnPath choose_decode_attn_path(int device, int64_t heads, int index_heads, int index_dim, int index_topk);
const char* decode_attn_path_name(DecodeAttnPath p);

// Indexer scores + top-k (as decode_index_topk). ws: decode_index_workspace_bytes(path, rows,
// max_visible) bytes (plain: the fp32 scores [rows, max(1, max_visible)]). sel [rows, k] (−1
// padded on kSm90), count [rows].
size_t decode_index_workspace_bytes(DecodeAttnPath path, int64_t rows, int64_t max_visible);
void decode_index(DecodeAttnPath path, const float* q, const float* weights, int64_t rows, const int32_t* pos,
                  const DecodeLayerCache* caches, int ratio, int heads, int dh, int64_t max_visible, int k,
                  int32_t* sel, int32_t* count, void* ws, cudaStream_t s);

// Sparse attention then the ring update of the new KV row (kv_new), as decode_sparse_attention +
// decode_ring_update (kSm90: the ring update first, then every window entry is read from the
// ring — the same values, since the ring stores kv_new exactly). Host bounds: max_extra ≥ every
// row's compressed candidates (CSA: sel_stride; HCA: max_len / ratio), split_rows ≥ rows (the
// split count is chosen for it: equal split_rows give bit-equal rows, sparse_decode.h), num_sms.
// ws: decode_attend_workspace_bytes(path, split_rows, H, num_sms) bytes.
size_t decode_attend_workspace_bytes(DecodeAttnPath path, int64_t split_rows, int H, int num_sms);
void decode_attend(DecodeAttnPath path, const DecodeAttnArgs& a, int64_t rows, int64_t split_rows, int64_t max_extra,
                   int num_sms, const int32_t* pos, const DecodeLayerCache* caches, void* ws, cudaStream_t s);

}  // namespace dsv4::gpu
