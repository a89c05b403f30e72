// Row-wise pointwise kernels: bf16 head RMS, RoPE from a device cos/sin table, Q8/Q4
// simulation, Walsh–Hadamard, embedding gather, bf16 add. Each reproduces the CPU function
// named in ops.h bit for bit; sequential fp32 sums stay sequential (one thread adds a row's
// terms in order; the terms themselves are formed in parallel where that helps).
// Shapes are in ops.h; rows are independent, so every kernel is a plain grid over rows.
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"
#include "gpu/row_ops.cuh"

namespace dsv4::gpu {
namespace {

// cpu attention.cpp head_rms_bf16: every intermediate rounded to bf16, sum in row order.
__global__ void head_rms_kernel(float* x, int64_t rows, int len, float eps) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float* q = x + r * len;
  float sum = 0.0f;
  for (int i = 0; i < len; ++i) sum += round_bf16(q[i] * q[i]);
  const float mean = round_bf16(sum / float(len));
  const float rs = round_bf16(1.0f / sqrtf(round_bf16(mean + eps)));
  for (int i = 0; i < len; ++i) q[i] = round_bf16(q[i] * rs);
}

// Same result, one warp per row (row_ops.cuh head_rms_row_warp: the sequential sum on lane 0,
// ≈ 1 µs at len 512 instead of len dependent load+multiply+round steps). Rows are independent,
// so warps are too.
constexpr int kHeadRmsWarps = 4;
__global__ void head_rms_warp_kernel(float* x, int64_t rows, int len, float eps) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) float sq_all[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = int64_t(blockIdx.x) * kHeadRmsWarps + warp;
  if (r >= rows) return;  // warp-uniform
  head_rms_row_warp(x + r * len, len, eps, sq_all + warp * len, lane);
}

__global__ void rope_kernel(float* x, int64_t rows, int64_t stride, int64_t rows_per_pos,
                            int64_t pos0, int64_t pos_step, const float* __restrict__ table,
                            int pairs, bool inverse) {
  pdl_wait();
  pdl_trigger();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * pairs) return;
  const int64_t r = idx / pairs;
  const int i = int(idx % pairs);
  const int64_t pos = pos0 + (r / rows_per_pos) * pos_step;
  rope_pair(x + r * stride + stride - 2 * pairs, table, pos, pairs, i, inverse);
}

// One warp per quantization block (kSimWarps blocks per CTA, row_ops.cuh simulate_block_warp).
// The old one-thread-per-block kernel ran `block` dependent loads per thread: ~4 µs on 2 rows ×
// 448 values.
constexpr int kSimWarps = 8;
template <bool Q4>
__global__ void __launch_bounds__(kSimWarps * 32) simulate_q_kernel(float* x, int64_t rows, int64_t stride, int len, int block) {
  pdl_wait();
  pdl_trigger();
  const int64_t idx = int64_t(blockIdx.x) * kSimWarps + (threadIdx.x >> 5);
  const int nb = len / block;
  if (idx >= rows * nb) return;  // warp-uniform
  simulate_block_warp<Q4>(x + (idx / nb) * stride + (idx % nb) * block, block, threadIdx.x & 31);
}

// Block per row, len threads (row_ops.cuh hadamard_row_block).
__global__ void hadamard_kernel(float* x, int len) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ double buf[];
  hadamard_row_block(x + int64_t(blockIdx.x) * len, len, buf);
}

__global__ void embed_kernel(const uint16_t* __restrict__ embed, const int32_t* __restrict__ ids,
                             int64_t n, int hc, int64_t dim, float* __restrict__ streams) {
  pdl_wait();
  pdl_trigger();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * hc * dim) return;
  const int64_t t = idx / (hc * dim), k = idx % dim;
  streams[idx] = bf16_bits_to_float(embed[int64_t(ids[t]) * dim + k]);
}

__global__ void add_bf16_kernel(const float* a, const float* b, int64_t total, int64_t dim, int b_div,
                                float* out) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t row = i / dim, k = i % dim;
  out[i] = round_bf16(a[i] + b[(row / b_div) * dim + k]);
}

__global__ void round_bf16_kernel(float* x, int64_t total) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) x[i] = round_bf16(x[i]);
}

unsigned blocks_for(int64_t total, int threads) { return static_cast<unsigned>((total + threads - 1) / threads); }

}  // namespace

void head_rms_bf16_rows(float* x, int64_t rows, int len, float eps, cudaStream_t s) {
  if (rows == 0) return;
  prof::Launch pl("head_rms", double(rows) * len * 8, s, [&] { return std::string("rows=") + std::to_string(rows) + " " + "len=" + std::to_string(len); });
  if (head_rms_warp_kernel_fits(len)) {
    const size_t smem = size_t(kHeadRmsWarps) * len * sizeof(float);
    launch_pdl(head_rms_warp_kernel, blocks_for(rows, kHeadRmsWarps), kHeadRmsWarps * 32, smem, s, x, rows, len, eps);
  } else {
    launch_pdl(head_rms_kernel, blocks_for(rows, 128), 128, 0, s, x, rows, len, eps);
  }
}

void rope_rows(float* x, int64_t rows, int64_t stride, int64_t rows_per_pos, int64_t pos0,
               int64_t pos_step, const float* table, int pairs, bool inverse, cudaStream_t s) {
  if (rows == 0) return;
  prof::Launch pl(inverse ? "rope (inverse)" : "rope", double(rows) * pairs * 16 + double(rows / rows_per_pos) * pairs * 8, s,
                  [&] { return std::string("rows=") + std::to_string(rows) + " " + "pairs=" + std::to_string(pairs); });
  launch_pdl(rope_kernel, blocks_for(rows * pairs, 256), 256, 0, s, x, rows, stride, rows_per_pos, pos0, pos_step,
             table, pairs, inverse);
}

void simulate_q8_rows(float* x, int64_t rows, int64_t stride, int len, int block, cudaStream_t s) {
  DSV4_CHECK(len % block == 0, "Q8 simulate: ", len, " not a multiple of ", block);
  if (rows == 0) return;
  prof::Launch pl("simulate_q8", double(rows) * len * 8, s, [&] { return std::string("rows=") + std::to_string(rows) + " " + "len=" + std::to_string(len); });
  launch_pdl(simulate_q_kernel<false>, blocks_for(rows * (len / block), kSimWarps), kSimWarps * 32, 0, s, x, rows, stride, len, block);
}

void simulate_q4_rows(float* x, int64_t rows, int64_t stride, int len, int block, cudaStream_t s) {
  DSV4_CHECK(len % block == 0, "Q4 simulate: ", len, " not a multiple of ", block);
  if (rows == 0) return;
  prof::Launch pl("simulate_q4", double(rows) * len * 8, s, [&] { return std::string("rows=") + std::to_string(rows) + " " + "len=" + std::to_string(len); });
  launch_pdl(simulate_q_kernel<true>, blocks_for(rows * (len / block), kSimWarps), kSimWarps * 32, 0, s, x, rows, stride, len, block);
}

void hadamard_rows(float* x, int64_t rows, int len, cudaStream_t s) {
  DSV4_CHECK(len > 0 && len <= 1024 && (len & (len - 1)) == 0, "Hadamard length ", len);
  if (rows == 0) return;
  prof::Launch pl("hadamard", double(rows) * len * 8, s, [&] { return std::string("rows=") + std::to_string(rows) + " " + "len=" + std::to_string(len); });
  launch_pdl(hadamard_kernel, static_cast<unsigned>(rows), len, len * sizeof(double), s, x, len);
}

void embed_rows(const uint16_t* embed, const int32_t* ids, int64_t n, int hc, int64_t dim,
                float* streams, cudaStream_t s) {
  if (n == 0) return;
  prof::Launch pl("embed", double(n) * dim * 2 + double(n) * hc * dim * 4, s, [&] { return std::string("n=") + std::to_string(n) + " " + "dim=" + std::to_string(dim); });
  launch_pdl(embed_kernel, blocks_for(n * hc * dim, 256), 256, 0, s, embed, ids, n, hc, dim, streams);
}

void add_bf16(const float* a, const float* b, int64_t n, int64_t dim, int b_div, float* out,
              cudaStream_t s) {
  if (n == 0) return;
  prof::Launch pl("add_bf16", double(n) * dim * 8 + double(n / b_div) * dim * 4, s, [&] { return std::string("n=") + std::to_string(n) + " " + "dim=" + std::to_string(dim); });
  launch_pdl(add_bf16_kernel, blocks_for(n * dim, 256), 256, 0, s, a, b, n * dim, dim, b_div, out);
}

void round_bf16_values(float* x, int64_t count, cudaStream_t s) {
  if (count == 0) return;
  prof::Launch pl("round_bf16", double(count) * 8, s);
  launch_pdl(round_bf16_kernel, blocks_for(count, 256), 256, 0, s, x, count);
}

}  // namespace dsv4::gpu
