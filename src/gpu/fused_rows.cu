// Fused row chains (ops.h "fused_rows.cu"): the attention's per-row tails in one launch each
// instead of two or three. Every chain runs row_ops.cuh's bodies — the ones the single-op
// kernels run — in the same order on the same values, so its output equals the separate calls
// bit for bit (fused_rows_test.cu). Where a single-op call would take another kernel (shapes
// or alignments its fast kernel declines), the launcher runs the separate calls instead.
#include <string>

#include "gpu/cuda_check.h"
#include "gpu/decode_ops.h"
#include "gpu/device_math.cuh"
#include "gpu/kv_fp8.cuh"
#include "gpu/kv_fp8.h"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"
#include "gpu/row_ops.cuh"

namespace dsv4::gpu {
namespace {

__device__ __forceinline__ int64_t row_position(const RowPositions& p, int64_t r) {
  const int64_t g = r / p.rows_per_pos;
  return p.positions != nullptr ? int64_t{p.positions[g]} : p.pos0 + g;
}

// Block per row, rms_norm_rows' vector-kernel thread count: RMSNorm in registers, then warp w
// quantizes the 128-value block its lanes hold (float4 index i·blockDim + 32w + lane).
template <int VPT>
__global__ void __launch_bounds__(256) rms_norm_q8_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                          int64_t dim, float eps, float* __restrict__ y,
                                                          uint8_t* __restrict__ codes, float* __restrict__ scales) {
  float4 wv[VPT];
  rms_norm_weights<VPT>(w, dim, wv);  // before the wait: weights
  pdl_wait();
  pdl_trigger();
  __shared__ double red[32];
  const int64_t row = blockIdx.x;
  float4 v[VPT];
  rms_norm_row_regs<VPT>(x + row * dim, wv, dim, eps, v, red);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * blockDim.x;  // float4 index; a warp: all in or all out
    if (j >= dim / 4) continue;
    if (y != nullptr) reinterpret_cast<float4*>(y + row * dim)[j] = v[i];
    const float q[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
    const int64_t kb = (j - lane) / 32;  // the warp's Q8 block in the row
    q8_quantize_block_warp(q, lane, codes + row * dim + kb * 128, scales + row * (dim / 128) + kb);
  }
}

// Warp per row (as head_rms_warp_kernel), then lanes 0..pairs−1 rotate the row's tail.
constexpr int kRowWarps = 4;
__global__ void head_rms_rope_kernel(float* x, int64_t rows, int len, float eps, const float* __restrict__ table,
                                     int pairs, RowPositions pos) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) float sq_all[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = int64_t(blockIdx.x) * kRowWarps + warp;
  if (r >= rows) return;  // warp-uniform
  float* q = x + r * len;
  head_rms_row_warp(q, len, eps, sq_all + warp * len, lane);
  __syncwarp();
  const int64_t p = row_position(pos, r);
  for (int i = lane; i < pairs; i += 32) rope_pair(q + len - 2 * pairs, table, p, pairs, i, false);
}

// Block per row (rms_norm_rows' vector-kernel thread count, VPT = 1): RMSNorm in registers into
// a shared row, RoPE of its tail, Q8 simulation of its head blocks (warp per block), store; with
// caches, the warps also encode the row into its window ring entry (decode_ring_update's
// encoder, one entry part per warp, on the same values).
__global__ void __launch_bounds__(256) norm_rope_simulate_q8_kernel(const float* __restrict__ x,
                                                                    const float* __restrict__ w, int dim, float eps,
                                                                    const float* __restrict__ table, int pairs,
                                                                    RowPositions pos, int block, float* __restrict__ y,
                                                                    const DecodeLayerCache* __restrict__ caches,
                                                                    int win) {
  float4 wv[1];
  rms_norm_weights<1>(w, dim, wv);  // before the wait: weights
  pdl_wait();
  pdl_trigger();
  __shared__ double red[32];
  extern __shared__ __align__(16) float srow[];
  const int64_t row = blockIdx.x;
  float4 v[1];
  rms_norm_row_regs<1>(x + row * dim, wv, dim, eps, v, red);
  const int j = threadIdx.x;
  if (j < dim / 4) reinterpret_cast<float4*>(srow)[j] = v[0];
  __syncthreads();
  const int64_t p = row_position(pos, row);
  for (int i = j; i < pairs; i += blockDim.x) rope_pair(srow + dim - 2 * pairs, table, p, pairs, i, false);
  __syncthreads();
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int b = threadIdx.x >> 5; b < (dim - 2 * pairs) / block; b += warps)
    simulate_block_warp<false>(srow + b * block, block, lane);
  __syncthreads();
  if (j < dim / 4) reinterpret_cast<float4*>(y + row * dim)[j] = reinterpret_cast<const float4*>(srow)[j];
  if (caches != nullptr) {  // the entry's parts (tiles, rope dims) spread over the warps
    uint8_t* ring = caches[row].window;
    const int64_t e = p % win;
    for (int part = threadIdx.x >> 5; part <= kKvTiles; part += warps)
      kv_encode_part_warp(srow, ring + kv_cache_data_offset(e), ring + kv_cache_scale_offset(e), part, lane);
  }
}

// Block per row, len threads: RoPE of the tail, Hadamard, Q4 simulation (warp per 32 values).
__global__ void rope_hadamard_q4_kernel(float* x, int len, const float* __restrict__ table, int pairs,
                                        RowPositions pos) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ double hbuf[];
  const int64_t row = blockIdx.x;
  float* v = x + row * len;
  const int64_t p = row_position(pos, row);
  if (threadIdx.x < pairs) rope_pair(v + len - 2 * pairs, table, p, pairs, threadIdx.x, false);
  __syncthreads();
  hadamard_row_block(v, len, hbuf);
  __syncthreads();
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int b = threadIdx.x >> 5; b < len / 32; b += warps) simulate_block_warp<true>(v + b * 32, 32, lane);
}

// Warp per row for len = 32·V (V = 2, 4, 8; the indexer's 128-value query heads): lane l holds
// values V·l .. V·l + V − 1 in registers — the RoPE pairs of the tail (whole pairs per lane), the
// Hadamard in double with the same operation per value and stage as hadamard_row_block (stages
// h < V inside the lane, the others with lane l ^ (h / V)), then the Q4 blocks of 32 values over
// 32 / V lanes (simulate_block_warp's formula). The same bits as the block-per-row kernel, without
// a block and 14 barriers per row.
template <int V>
__global__ void __launch_bounds__(256) rope_hadamard_q4_warp_kernel(float* x, int64_t rows, const float* __restrict__ table,
                                                                   int pairs, RowPositions pos) {
  pdl_wait();
  pdl_trigger();
  constexpr int len = 32 * V, G = 32 / V;  // G lanes per Q4 block
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;
  float* rv = x + row * len + V * lane;
  float v[V];
#pragma unroll
  for (int j = 0; j < V; j += 2) {
    const float2 q = *reinterpret_cast<const float2*>(rv + j);
    v[j] = q.x, v[j + 1] = q.y;
  }
  const int64_t p = row_position(pos, row);
  const int tail = len - 2 * pairs;  // even: pairs start on even indices
#pragma unroll
  for (int j = 0; j < V; j += 2) {
    const int idx = V * lane + j;
    if (idx >= tail) {
      const int i = (idx - tail) / 2;
      const float2 r = rope_rotate(v[j], v[j + 1], table[(p * pairs + i) * 2], table[(p * pairs + i) * 2 + 1]);
      v[j] = r.x, v[j + 1] = r.y;
    }
  }
  double d[V];
#pragma unroll
  for (int j = 0; j < V; ++j) d[j] = v[j];
#pragma unroll
  for (int h = 1; h < V; h *= 2) {
    double n[V];
#pragma unroll
    for (int j = 0; j < V; ++j) n[j] = (j & h) ? d[j ^ h] - d[j] : d[j] + d[j ^ h];
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] = n[j];
  }
#pragma unroll
  for (int m = 1; m < 32; m *= 2)  // stage h = m·V
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const double b = __shfl_xor_sync(0xffffffffu, d[j], m);
      d[j] = (lane & m) ? b - d[j] : d[j] + b;
    }
  const float scale = float(1.0 / sqrt(double(len)));
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    v[j] = round_bf16(float(d[j]) * scale);
    amax = fmaxf(amax, fabsf(v[j]));
  }
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float sc = q4_block_scale(amax), inv = 1.0f / sc;  // powers of two: v·inv == v / sc exactly
#pragma unroll
  for (int j = 0; j < V; j += 2) {
    *reinterpret_cast<float2*>(rv + j) = make_float2(q4_sim_value(v[j], inv, sc), q4_sim_value(v[j + 1], inv, sc));
  }
}

// rms_norm_rows' choice for these pointers (row_ops.cuh): float4s per thread, 0 = its other kernel.
int rms_vec_per_thread(int64_t dim, const void* x, const void* w, const void* y) {
  return rms_norm_vec_per_thread(dim, aligned16(x) && aligned16(w) && (y == nullptr || aligned16(y)));
}

// The single-op RoPE of the unfused paths, at the rows' positions.
void rope_rows_at(float* x, int64_t rows, int64_t stride, const float* table, int pairs, RowPositions pos,
                  cudaStream_t s) {
  if (pos.positions != nullptr) decode_rope_rows(x, rows, stride, pos.rows_per_pos, pos.positions, table, pairs, false, s);
  else rope_rows(x, rows, stride, pos.rows_per_pos, pos.pos0, 1, table, pairs, false, s);
}

std::string rows_dim(int64_t rows, int64_t dim) { return "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim); }

}  // namespace

void rms_norm_q8_rows(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y, uint8_t* codes,
                      float* scales, cudaStream_t s) {
  DSV4_CHECK(dim % 128 == 0, "rms_norm_q8_rows: width ", dim, " is not a multiple of 128");
  if (rows == 0) return;
  const int per = rms_vec_per_thread(dim, x, w, y);
  if (per == 0) {  // rms_norm_rows takes its other kernel: the two calls (y is needed between them)
    DSV4_CHECK(y != nullptr, "rms_norm_q8_rows: width ", dim, " or alignment needs the unfused path, which needs y");
    rms_norm_rows(x, w, rows, dim, eps, y, s);
    quantize_q8_rows(y, rows, dim, codes, scales, s);
    return;
  }
  prof::Launch pl("rms_norm+q8", double(rows) * dim * (y ? 9 : 5) + double(dim) * 4 + double(rows) * dim / 32, s,
                  [&] { return rows_dim(rows, dim); });
  const unsigned grid = static_cast<unsigned>(rows), threads = rms_norm_vec_threads(dim);
  if (per == 1) launch_pdl(rms_norm_q8_kernel<1>, grid, threads, 0, s, x, w, dim, eps, y, codes, scales);
  else if (per == 2) launch_pdl(rms_norm_q8_kernel<2>, grid, threads, 0, s, x, w, dim, eps, y, codes, scales);
  else launch_pdl(rms_norm_q8_kernel<4>, grid, threads, 0, s, x, w, dim, eps, y, codes, scales);
}

void head_rms_rope_rows(float* x, int64_t rows, int len, float eps, const float* table, int pairs, RowPositions pos,
                        cudaStream_t s) {
  DSV4_CHECK(2 * pairs <= len, "head_rms_rope_rows: ", pairs, " rotary pairs in rows of ", len);
  if (rows == 0) return;
  if (!head_rms_warp_kernel_fits(len)) {  // head_rms_bf16_rows' one-thread kernel: the two calls
    head_rms_bf16_rows(x, rows, len, eps, s);
    rope_rows_at(x, rows, len, table, pairs, pos, s);
    return;
  }
  prof::Launch pl("head_rms+rope", double(rows) * len * 8 + double(rows / pos.rows_per_pos) * pairs * 8, s,
                  [&] { return rows_dim(rows, len); });
  const unsigned grid = static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
  launch_pdl(head_rms_rope_kernel, grid, kRowWarps * 32, size_t(kRowWarps) * len * sizeof(float), s, x, rows, len, eps,
             table, pairs, pos);
}

namespace {
void norm_rope_simulate_q8(const float* x, const float* w, int64_t rows, int dim, float eps, const float* table,
                           int pairs, RowPositions pos, int block, float* y, const DecodeLayerCache* caches, int win,
                           cudaStream_t s) {
  const int len = dim - 2 * pairs;
  DSV4_CHECK(len >= 0 && block > 0 && len % block == 0, "norm_rope_simulate_q8_rows: ", len,
             " simulated values not a multiple of ", block);
  if (rows == 0) return;
  if (rms_vec_per_thread(dim, x, w, y) != 1) {  // not one float4 per thread: the three calls
    rms_norm_rows(x, w, rows, dim, eps, y, s);
    rope_rows_at(y, rows, dim, table, pairs, pos, s);
    simulate_q8_rows(y, rows, dim, len, block, s);
    if (caches != nullptr) decode_ring_update(y, rows, pos.positions, caches, win, dim, s);
    return;
  }
  prof::Launch pl(caches ? "norm+rope+sim_q8+ring" : "norm+rope+sim_q8",
                  double(rows) * dim * 8 + double(dim) * 4 + double(rows) * pairs * 8 +
                      (caches ? double(rows) * kKvEntryBytes : 0.0),
                  s, [&] { return rows_dim(rows, dim); });
  launch_pdl(norm_rope_simulate_q8_kernel, static_cast<unsigned>(rows), rms_norm_vec_threads(dim),
             size_t(dim) * sizeof(float), s, x, w, dim, eps, table, pairs, pos, block, y, caches, win);
}
}  // namespace

void norm_rope_simulate_q8_rows(const float* x, const float* w, int64_t rows, int dim, float eps, const float* table,
                                int pairs, RowPositions pos, int block, float* y, cudaStream_t s) {
  norm_rope_simulate_q8(x, w, rows, dim, eps, table, pairs, pos, block, y, nullptr, 0, s);
}

void decode_kv_rows_to_ring(const float* x, const float* w, int64_t rows, int dim, float eps, const float* table,
                            int pairs, const int32_t* pos, int block, float* y, const DecodeLayerCache* caches, int win,
                            cudaStream_t s) {
  DSV4_CHECK(dim == kKvDim && caches != nullptr && pos != nullptr && win > 0,
             "decode_kv_rows_to_ring: the FP8 ring holds ", kKvDim, "-wide entries (got ", dim, ")");
  norm_rope_simulate_q8(x, w, rows, dim, eps, table, pairs, RowPositions{.positions = pos}, block, y, caches, win, s);
}

void rope_hadamard_q4_rows(float* x, int64_t rows, int len, const float* table, int pairs, RowPositions pos,
                           cudaStream_t s) {
  DSV4_CHECK(len >= 32 && len <= 1024 && (len & (len - 1)) == 0 && 2 * pairs <= len,
             "rope_hadamard_q4_rows: length ", len, " (a power of two in [32, 1024]) with ", pairs, " rotary pairs");
  if (rows == 0) return;
  prof::Launch pl("rope+hadamard+sim_q4", double(rows) * len * 8 + double(rows / pos.rows_per_pos) * pairs * 8, s,
                  [&] { return rows_dim(rows, len); });
  const unsigned warp_blocks = static_cast<unsigned>((rows + 7) / 8);  // 8 rows (warps) per block
  if (len == 64 && aligned8(x)) {
    launch_pdl(rope_hadamard_q4_warp_kernel<2>, warp_blocks, 256u, 0, s, x, rows, table, pairs, pos);
  } else if (len == 128 && aligned8(x)) {
    launch_pdl(rope_hadamard_q4_warp_kernel<4>, warp_blocks, 256u, 0, s, x, rows, table, pairs, pos);
  } else if (len == 256 && aligned8(x)) {
    launch_pdl(rope_hadamard_q4_warp_kernel<8>, warp_blocks, 256u, 0, s, x, rows, table, pairs, pos);
  } else {
    launch_pdl(rope_hadamard_q4_kernel, static_cast<unsigned>(rows), static_cast<unsigned>(len),
               size_t(len) * sizeof(double), s, x, len, table, pairs, pos);
  }
}

}  // namespace dsv4::gpu
