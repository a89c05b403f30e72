// Batched-decode kernels (decode_ops.h): one new token per row, positions and cache pointers
// read on the device. Each kernel calls the same device code as its host-position
// counterpart (compressor_device.cuh, indexer_device.cuh, attention_device.cuh, and the
// RoPE arithmetic copied from pointwise.cu, the ring's FP8 encoder from kv_fp8.cuh), so results are
// bit-identical to the per-sequence path. Grids depend only on the row count and host upper
// bounds; rows past their own bound exit early or loop zero times.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "gpu/attention_device.cuh"
#include "gpu/compressor_device.cuh"
#include "gpu/cuda_check.h"
#include "gpu/decode_ops.h"
#include "gpu/device_math.cuh"
#include "gpu/indexer_device.cuh"
#include "gpu/kv_fp8.cuh"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"
#include "gpu/sm90_indexer_topk.h"
#include "gpu/sparse_decode.h"

namespace dsv4::gpu {
namespace {

constexpr int kIndexWarps = 8;
constexpr int64_t kMaxIndexBlocksPerRow = 128;  // grid-stride beyond this

unsigned blocks_for(int64_t total, int threads) { return static_cast<unsigned>((total + threads - 1) / threads); }

// As pointwise.cu rope_kernel, with pos0 + (r / rows_per_pos)·pos_step → pos[r / rows_per_pos].
__global__ void rope_kernel(float* x, int64_t rows, int64_t stride, int64_t rows_per_pos,
                            const int32_t* __restrict__ positions, const float* __restrict__ table, int pairs,
                            bool inverse) {
  pdl_wait();
  pdl_trigger();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * pairs) return;
  const int64_t r = idx / pairs;
  const int i = int(idx % pairs);
  const int64_t pos = positions[r / rows_per_pos];
  rope_pair(x + r * stride + stride - 2 * pairs, table, pos, pairs, i, inverse);
}

// Block (c, row): the kBf16CopyFlagValues values [c·kBf16CopyFlagValues, ...) of the row, one
// float4 a thread; those inside a head's rotary part (two pairs each) are rotated (rope_rotate, as
// rope_pair) and stored back; every float4 goes to x16 as two bf16 pairs; the block ANDs whether its
// values are bf16 values into exact[row, c].
constexpr int kRopeBf16Threads = int(kBf16CopyFlagValues / 4);
__global__ void __launch_bounds__(kRopeBf16Threads) rope_inverse_bf16_kernel(float* x, int H, int d,
                                                                           const int32_t* __restrict__ positions,
                                                                           const float* __restrict__ table, int pairs,
                                                                           uint16_t* __restrict__ x16,
                                                                           int32_t* __restrict__ exact) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.y, nvec = int64_t(H) * d / 4;
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // float4 of the row
  bool ok = true;
  if (k < nvec) {
    float4* xr = reinterpret_cast<float4*>(x + row * H * d);
    float4 v = xr[k];
    const int c = int((k * 4) % d), rot0 = d - 2 * pairs;
    if (c >= rot0) {
      const int64_t pos = positions[row];
      const int i = (c - rot0) / 2;  // pairs i, i + 1
      const float2 p0 = rope_rotate(v.x, v.y, table[(pos * pairs + i) * 2], -table[(pos * pairs + i) * 2 + 1]);
      const float2 p1 =
          rope_rotate(v.z, v.w, table[(pos * pairs + i + 1) * 2], -table[(pos * pairs + i + 1) * 2 + 1]);
      v = make_float4(p0.x, p0.y, p1.x, p1.y);
      xr[k] = v;
    }
    ok = is_bf16_value(v.x) && is_bf16_value(v.y) && is_bf16_value(v.z) && is_bf16_value(v.w);
    reinterpret_cast<uint2*>(x16 + row * H * d)[k] =
        make_uint2(bf16_bits(v.x) | uint32_t{bf16_bits(v.y)} << 16, bf16_bits(v.z) | uint32_t{bf16_bits(v.w)} << 16);
  }
  ok = __syncthreads_and(ok);
  if (threadIdx.x == 0) exact[row * gridDim.x + blockIdx.x] = ok ? 1 : 0;
}

// Block per row, h threads (thread = channel): the step, then (block-uniform) the finish of
// the emitted entry in a shared fp32 row that is then stored as the indexer's bf16 key or
// (attention) encoded into the FP8 cache. Dynamic smem: h doubles, then h floats.
__global__ void compressor_kernel(const __grid_constant__ DecodeCompressorArgs a, const int32_t* __restrict__ positions,
                                  const DecodeLayerCache* __restrict__ caches) {
  pdl_wait();
  pdl_trigger();
  __shared__ double red[32];
  extern __shared__ double buf[];
  const int64_t row = blockIdx.x;
  const DecodeCompressorCache c = a.indexer ? caches[row].index : caches[row].comp;
  const int width = a.overlap ? 2 * a.h : a.h;
  const int64_t pos = positions[row];
  const int64_t entry = pos / a.ratio;
  float* e = reinterpret_cast<float*>(buf + a.h);
  const bool emitted = detail::compressor_token(a.kv + row * width, a.score + row * width, a.ape, pos, a.ratio, a.h,
                                                a.overlap, int(threadIdx.x), c.state_kv, c.state_score, e);
  if (!emitted) return;  // same for every thread of the row
  __syncthreads();       // every channel of the raw entry is written
  detail::compressor_finish_entry(e, entry, a.h, a.norm, a.eps, a.ratio, a.rope_table, a.pairs, a.indexer, red, buf);
  if (a.indexer)
    detail::compressor_store_index_key(e, entry, a.h, c.keys);
  else
    detail::compressor_store_entry(e, entry, c.cache);
}

// grid (x-blocks, rows); warps stride over the row's visible keys.
__global__ void index_scores_kernel(const float* __restrict__ q, const float* __restrict__ weights,
                                    const int32_t* __restrict__ positions, const DecodeLayerCache* __restrict__ caches,
                                    int ratio, int heads, int dh, float* scores, int64_t stride) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.y;
  const int64_t visible = (int64_t(positions[row]) + 1) / ratio;
  const uint16_t* keys = caches[row].index.keys;
  const int lane = threadIdx.x & 31;
  const int64_t step = int64_t(gridDim.x) * kIndexWarps;
  for (int64_t w = int64_t(blockIdx.x) * kIndexWarps + (threadIdx.x >> 5); w < visible; w += step) {
    const float total =
        detail::index_score_warp(q + row * heads * dh, weights + row * heads, keys + w * dh, heads, dh, lane);
    if (lane == 0) scores[row * stride + w] = total;
  }
}

__global__ void index_topk_kernel(const float* __restrict__ scores, const int32_t* __restrict__ positions, int ratio,
                                  int64_t stride, int k, int32_t* sel, int32_t* count) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x;
  const int64_t visible = (int64_t(positions[row]) + 1) / ratio;
  detail::index_topk_block(scores + row * stride, visible, k, sel + row * k, count + row);
}

// Block per (row, head): the row's arguments as a one-token SparseAttnArgs call.
__global__ void __launch_bounds__(detail::kSparseAttnThreads)
    attention_kernel(const __grid_constant__ DecodeAttnArgs d, const int32_t* __restrict__ positions,
                     const DecodeLayerCache* __restrict__ caches) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x / d.H;
  const int h = int(blockIdx.x % d.H);
  SparseAttnArgs a;
  a.q = d.q + row * d.H * d.d;
  a.kv_new = d.kv_new + row * d.d;
  a.ring = caches[row].window;
  a.compressed = caches[row].comp.cache;
  a.selected = d.selected != nullptr ? d.selected + row * d.sel_stride : nullptr;
  a.sel_count = d.sel_count != nullptr ? d.sel_count + row : nullptr;
  a.sel_stride = d.sel_stride;
  a.sink = d.sink;
  a.scale = d.scale;
  a.H = d.H;
  a.d = d.d;
  a.win = d.win;
  a.ratio = d.ratio;
  a.n = 1;
  a.start_pos = positions[row];
  a.window_len = d.win;
  a.out = d.out + row * d.H * d.d;
  detail::sparse_attention_item(a, h);
}

constexpr int kRingWarps = 8;

// One warp per row (attention.cu ring_kernel with the row's own position).
__global__ void ring_kernel(const float* __restrict__ kv, int64_t rows, const int32_t* __restrict__ positions,
                            const DecodeLayerCache* __restrict__ caches, int win) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = int64_t(blockIdx.x) * kRingWarps + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t e = int64_t(positions[row]) % win;
  uint8_t* ring = caches[row].window;
  kv_encode_entry_warp(kv + row * kKvDim, ring + kv_cache_data_offset(e), ring + kv_cache_scale_offset(e),
                       int(threadIdx.x & 31));
}

}  // namespace

void decode_rope_rows(float* x, int64_t rows, int64_t stride, int64_t rows_per_pos, const int32_t* pos,
                      const float* table, int pairs, bool inverse, cudaStream_t s) {
  if (rows == 0) return;
  prof::Launch pl(inverse ? "decode_rope (inverse)" : "decode_rope",
                  double(rows) * pairs * 16 + double(rows / rows_per_pos) * pairs * 8, s,
                  [&] { return "rows=" + std::to_string(rows) + " pairs=" + std::to_string(pairs); });
  launch_pdl(rope_kernel, blocks_for(rows * pairs, 256), 256, 0, s, x, rows, stride, rows_per_pos, pos, table, pairs, inverse);
}

void decode_rope_inverse_bf16(float* x, int64_t rows, int H, int d, const int32_t* pos, const float* table, int pairs,
                             uint16_t* x16, int32_t* exact, cudaStream_t s) {
  DSV4_CHECK(d % 4 == 0 && pairs % 2 == 0 && 2 * pairs <= d && aligned16(x) && aligned16(x16),
             "decode_rope_inverse_bf16: head dim ", d, ", ", pairs, " rotary pairs (needs d % 4 == 0, even pairs, "
             "16-byte aligned buffers)");
  DSV4_CHECK(rows <= 65535, "decode_rope_inverse_bf16: ", rows, " rows > 65535");
  if (rows == 0) return;
  prof::Launch pl("decode_rope (inverse) + bf16", double(rows) * H * d * (4 + 2) + double(rows) * H * pairs * 12, s,
                  [&] { return "rows=" + std::to_string(rows) + " H=" + std::to_string(H) + " d=" + std::to_string(d); });
  const int64_t chunks = (int64_t(H) * d + kBf16CopyFlagValues - 1) / kBf16CopyFlagValues;
  launch_pdl(rope_inverse_bf16_kernel, dim3(unsigned(chunks), unsigned(rows)), kRopeBf16Threads, 0, s, x, H, d, pos,
             table, pairs, x16, exact);
}

void decode_compressor(const DecodeCompressorArgs& a, int64_t rows, const int32_t* pos,
                       const DecodeLayerCache* caches, cudaStream_t s) {
  DSV4_CHECK(a.h % 64 == 0 && a.h <= 1024 && (!a.indexer || (a.h & (a.h - 1)) == 0), "compressor head dim ", a.h);
  DSV4_CHECK(a.ratio > 0, "compressor ratio ", a.ratio);
  DSV4_CHECK(a.indexer || a.h == kKvDim, "attention compressor head dim ", a.h, ": the FP8 KV cache holds ", kKvDim);
  if (rows == 0) return;
  const double width = double(a.overlap ? 2 : 1) * a.h;
  // Per row: its projections read, one state slot (kv, score) written. Emissions (pooling
  // the state, the finish) depend on device positions and are not counted.
  prof::Launch pl(a.indexer ? "decode_compressor (indexer)" : "decode_compressor", double(rows) * width * 16, s,
                  [&] { return "rows=" + std::to_string(rows) + " ratio=" + std::to_string(a.ratio); });
  const size_t smem = a.h * (sizeof(double) + sizeof(float));
  launch_pdl(compressor_kernel, static_cast<unsigned>(rows), a.h, smem, s, a, pos, caches);
}

void decode_index_topk(const float* q, const float* weights, int64_t rows, const int32_t* pos,
                       const DecodeLayerCache* caches, int ratio, int heads, int dh, int64_t max_visible,
                       float* scores, int64_t score_stride, int k, int32_t* sel, int32_t* count, cudaStream_t s) {
  DSV4_CHECK(score_stride >= max_visible, "indexer score stride ", score_stride, " < ", max_visible);
  DSV4_CHECK(rows <= 65535, "too many indexer rows: ", rows);
  DSV4_CHECK(dh <= 256, "indexer head dim ", dh);
  if (rows == 0) return;
  if (max_visible > 0) {
    const int64_t bx = std::min<int64_t>(kMaxIndexBlocksPerRow, (max_visible + kIndexWarps - 1) / kIndexWarps);
    prof::Launch pl("decode_index_scores",
                    double(rows) * (heads * (dh + 1) * 4.0 + double(max_visible) * (dh * 2 + 4.0)), s,
                    [&] { return "rows=" + std::to_string(rows) + " keys<=" + std::to_string(max_visible); });
    launch_pdl(index_scores_kernel, dim3(static_cast<unsigned>(bx), static_cast<unsigned>(rows)), kIndexWarps * 32, 0,
               s, q, weights, pos, caches, ratio, heads, dh, scores, score_stride);
  }
  prof::Launch pl("decode_index_topk", double(rows) * (double(max_visible) * 4 + (k + 1) * 4.0), s,
                  [&] { return "rows=" + std::to_string(rows) + " keys<=" + std::to_string(max_visible); });
  launch_pdl(index_topk_kernel, static_cast<unsigned>(rows), 256, 0, s, scores, pos, ratio, score_stride, k, sel, count);
}

void decode_sparse_attention(const DecodeAttnArgs& a, int64_t rows, const int32_t* pos,
                             const DecodeLayerCache* caches, cudaStream_t s) {
  DSV4_CHECK(a.d == kKvDim, "head_dim ", a.d, ": the FP8 KV caches hold ", kKvDim, "-wide entries");
  if (rows == 0) return;
  // Bytes: q and out per row; the KV rows read depend on positions (device side): counted
  // as the window only (a lower bound).
  prof::Launch pl(a.ratio == 0 ? "decode_attention (window)" : a.selected ? "decode_attention (CSA)"
                                                                           : "decode_attention (HCA)",
                  double(rows) * (double(a.win) * kKvEntryBytes + 2.0 * a.H * a.d * 4), s,
                  [&] { return "rows=" + std::to_string(rows) + " H=" + std::to_string(a.H); });
  launch_pdl(attention_kernel, static_cast<unsigned>(rows * a.H), detail::kSparseAttnThreads, 0, s, a, pos, caches);
}

void decode_ring_update(const float* kv, int64_t rows, const int32_t* pos, const DecodeLayerCache* caches, int win,
                        int d, cudaStream_t s) {
  DSV4_CHECK(d == kKvDim, "head_dim ", d, ": the FP8 KV caches hold ", kKvDim, "-wide entries");
  if (rows == 0) return;
  prof::Launch pl("decode_ring_update", double(rows) * (d * 4 + kKvEntryBytes), s);
  launch_pdl(ring_kernel, blocks_for(rows, kRingWarps), kRingWarps * 32, 0, s, kv, rows, pos, caches, win);
}

namespace {
__global__ void positions_kernel(int32_t* pos, int64_t n, int64_t first) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) pos[i] = int32_t(first + i);
}
}  // namespace

void fill_positions(int32_t* pos, int64_t n, int64_t first, cudaStream_t s) {
  DSV4_CHECK(first >= 0 && first + n <= INT32_MAX, "positions ", first, "+", n);
  if (n == 0) return;
  positions_kernel<<<blocks_for(n, 256), 256, 0, s>>>(pos, n, first);
  CUDA_CHECK_LAUNCH();
}

// ---- Dispatch ------------------------------------------------------------------------------

DecodeAttnPath choose_decode_attn_path(int device, int64_t heads, int index_heads, int index_dim, int index_topk) {
  const char* env = std::getenv("DSV4_GPU_ATTN");
  if (env != nullptr && std::string(env) == "reference") return DecodeAttnPath::kPlain;
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const bool shapes = heads >= 1 && heads <= sm90::kHeads &&
                      (index_heads == 0 || (index_heads % 8 == 0 && index_heads <= sm90::kIndexHeads &&
                                            index_dim == sm90::kIndexDim && index_topk >= 1 &&
                                            index_topk <= sm90::kIndexTopk));
  return major == 9 && minor == 0 && shapes ? DecodeAttnPath::kSm90 : DecodeAttnPath::kPlain;
}

const char* decode_attn_path_name(DecodeAttnPath p) { return p == DecodeAttnPath::kSm90 ? "sm90" : "plain"; }

size_t decode_index_workspace_bytes(DecodeAttnPath path, int64_t rows, int64_t max_visible) {
  if (path == DecodeAttnPath::kSm90) return sm90::indexer_workspace_bytes(int(rows), int(max_visible));
  return size_t(rows) * size_t(std::max<int64_t>(1, max_visible)) * sizeof(float);
}

void decode_index(DecodeAttnPath path, const float* q, const float* weights, int64_t rows, const int32_t* pos,
                  const DecodeLayerCache* caches, int ratio, int heads, int dh, int64_t max_visible, int k,
                  int32_t* sel, int32_t* count, void* ws, cudaStream_t s) {
  if (path == DecodeAttnPath::kPlain) {
    decode_index_topk(q, weights, rows, pos, caches, ratio, heads, dh, max_visible, static_cast<float*>(ws),
                      std::max<int64_t>(1, max_visible), k, sel, count, s);
    return;
  }
  DSV4_CHECK(dh == sm90::kIndexDim && max_visible <= INT32_MAX, "sm90 indexer: head dim ", dh, " keys ", max_visible);
  if (rows == 0) return;
  sm90::IndexerArgs a;
  a.q_f32 = q;
  a.heads = heads;
  a.weights = weights;
  a.pos = pos;
  a.ratio = ratio;
  a.caches = caches;
  a.rows = static_cast<int>(rows);
  a.max_visible = static_cast<int>(max_visible);
  a.k = k;
  a.topk = sel;
  a.count = count;
  // Bytes: the keys read as bf16 (an upper bound: rows past their own length read less).
  prof::Launch pl("sm90_index_topk", double(rows) * (double(max_visible) * dh * 2 + heads * (dh + 1) * 4.0), s,
                  [&] { return "rows=" + std::to_string(rows) + " keys<=" + std::to_string(max_visible); });
  sm90::indexer_topk(a, ws, s);
}

size_t decode_attend_workspace_bytes(DecodeAttnPath path, int64_t split_rows, int H, int num_sms) {
  if (path == DecodeAttnPath::kPlain) return 0;
  return sm90::sparse_decode_workspace_bound(static_cast<int>(split_rows), H, num_sms);
}

void decode_attend(DecodeAttnPath path, const DecodeAttnArgs& d, int64_t rows, int64_t split_rows, int64_t max_extra,
                   int num_sms, const int32_t* pos, const DecodeLayerCache* caches, void* ws, cudaStream_t s) {
  if (path == DecodeAttnPath::kPlain) {
    decode_sparse_attention(d, rows, pos, caches, s);
    decode_ring_update(d.kv_new, rows, pos, caches, d.win, d.d, s);
    return;
  }
  DSV4_CHECK(d.d == kKvDim, "head_dim ", d.d, ": the FP8 KV caches hold ", kKvDim, "-wide entries");
  if (rows == 0) return;
  if (!d.ring_written) decode_ring_update(d.kv_new, rows, pos, caches, d.win, d.d, s);
  const int64_t extra = d.ratio > 0 ? max_extra : 0;
  const sm90::SparseDecodePlan plan = sm90::plan_sparse_decode(
      static_cast<int>(rows), d.win, static_cast<int>(extra), num_sms, 16, d.H, static_cast<int>(split_rows));
  sm90::SparseDecodeArgs a;
  a.q_f32 = d.q;
  a.heads = d.H;
  a.main_pool = kv_cache_pool(nullptr);
  a.extra_pool = kv_cache_pool(nullptr);
  a.pos = pos;
  a.win = d.win;
  a.caches = caches;
  if (d.ratio > 0) {
    if (d.selected != nullptr) {
      a.extra_idx = d.selected;
      a.extra_len = d.sel_count;
      a.extra_stride = d.sel_stride;
    } else {
      a.extra_ratio = d.ratio;
    }
  }
  a.sink = d.sink;
  a.scale = d.scale;
  a.out_f32 = d.out;
  a.rows = static_cast<int>(rows);
  // Bytes: q and out (fp32) per row and the upper bound of candidate entries gathered.
  prof::Launch pl(d.ratio == 0 ? "sm90_attention (window)" : d.selected ? "sm90_attention (CSA)"
                                                                         : "sm90_attention (HCA)",
                  double(rows) * (double(d.win + extra) * kKvEntryBytes + 2.0 * d.H * d.d * 4), s,
                  [&] { return "rows=" + std::to_string(rows) + " H=" + std::to_string(d.H) + " splits=" +
                               std::to_string(plan.splits); });
  sm90::sparse_decode(a, plan, ws, s);
}

}  // namespace dsv4::gpu
