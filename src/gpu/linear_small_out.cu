// Small-output dense linear split over K (contract: ops.h, small_out_linear).
//
// The mHC projections are 24 (or 4) outputs × n_hc·D = 16384 inputs with fp32 weights: one
// row-tile kernel would put 2 CTAs on 132 SMs and walk K serially. Here kernel 1 cuts K into
// 256-wide chunks (one CTA per chunk × row group) and writes each chunk's double partials to a
// workspace; kernel 2 adds a row's chunks with one warp per (row, output).
//
// Arithmetic of one output (a function of `in` only, never of the row count or the tiling, so
// rows are batch-invariant): chunk c covers k in [256c, 256c + 256); inside it, quarter q
// (0..3) is the k ≡ q (mod 4) positions in ascending order, summed as a double FMA chain from
// 0 (fp32·fp32 products are exact in double); the chunk value is (s0 + s1) + (s2 + s3). Lane l
// of a warp adds chunks l, l + 32, l + 64, … in order, the 32 lane sums meet in an xor
// butterfly, and the total is rounded to fp32 once. The CPU adds the same exact products
// sequentially in double, so the two agree up to the last bits of a double before the fp32
// rounding.
#include <cuda_runtime.h>

#include <algorithm>

#include "gpu/cuda_check.h"
#include "gpu/linear_small_out.cuh"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kChunk = 256;               // K per chunk (per CTA)
constexpr int kQuarters = 4;              // independent chains per chunk
constexpr int kPad = kChunk + 4;          // smem row stride (floats): spreads rows over banks
constexpr int kMaxRowsPerCta = 8;
constexpr int kThreads = 256;

// partial[(c · rows + r) · out + o] for the rows [r0, r0 + rows_here) of this call.
template <bool kBf16>
__global__ void __launch_bounds__(kThreads) small_out_partials_kernel(const float* __restrict__ x, int64_t x_stride,
                                                                      const void* __restrict__ w, int out, int64_t in,
                                                                      int64_t rows, double* __restrict__ partial) {
  pdl_wait();
  pdl_trigger();
  __shared__ float ws[kSmallOutMax][kPad];
  __shared__ float xs[kMaxRowsPerCta][kPad];
  __shared__ double qs[kSmallOutMax * kMaxRowsPerCta][kQuarters];
  const int64_t c = blockIdx.x, k0 = c * kChunk;
  const int kn = int(min(int64_t{kChunk}, in - k0));
  const int64_t r0 = int64_t(blockIdx.y) * kMaxRowsPerCta;
  const int rg = int(min(int64_t{kMaxRowsPerCta}, rows - r0));
  for (int i = threadIdx.x; i < out * kChunk; i += kThreads) {
    const int o = i / kChunk, k = i % kChunk;
    float v = 0.0f;
    if (k < kn) {
      if (kBf16) v = __uint_as_float(uint32_t(static_cast<const uint16_t*>(w)[o * in + k0 + k]) << 16);
      else v = __ldg(static_cast<const float*>(w) + o * in + k0 + k);
    }
    ws[o][k] = v;
  }
  for (int i = threadIdx.x; i < rg * kChunk; i += kThreads) {
    const int r = i / kChunk, k = i % kChunk;
    xs[r][k] = k < kn ? __ldg(x + (r0 + r) * x_stride + k0 + k) : 0.0f;
  }
  __syncthreads();
  const int items = out * rg * kQuarters;
  for (int it = threadIdx.x; it < items; it += kThreads) {
    const int q = it % kQuarters, pair = it / kQuarters, o = pair % out, r = pair / out;
    double acc = 0.0;
#pragma unroll 8
    for (int j = 0; j < kChunk / kQuarters; ++j) {
      const int k = j * kQuarters + q;
      acc = __fma_rn(double(xs[r][k]), double(ws[o][k]), acc);
    }
    qs[pair][q] = acc;
  }
  __syncthreads();
  for (int pair = threadIdx.x; pair < out * rg; pair += kThreads) {
    const int o = pair % out, r = pair / out;
    partial[(c * rows + r0 + r) * out + o] = (qs[pair][0] + qs[pair][1]) + (qs[pair][2] + qs[pair][3]);
  }
}

// One warp per (row, output): y[r · out + o] = fp32(Σ chunks) in the order of the file comment.
__global__ void __launch_bounds__(kThreads) small_out_reduce_kernel(const double* __restrict__ partial, int64_t chunks,
                                                                    int64_t rows, int out, float* __restrict__ y) {
  pdl_wait();
  pdl_trigger();
  const int64_t pair = (int64_t(blockIdx.x) * kThreads + threadIdx.x) >> 5;
  if (pair >= rows * out) return;  // warp-uniform
  const double v = small_out_reduce_warp(partial, chunks, rows * out, pair);
  if ((threadIdx.x & 31) == 0) y[pair] = float(v);
}

void launch_partials(const float* x, int64_t n, int64_t x_stride, const void* w, bool w_bf16, int64_t out, int64_t in,
                     int64_t chunks, double* ws, cudaStream_t s) {
  const dim3 grid(unsigned(chunks), unsigned((n + kMaxRowsPerCta - 1) / kMaxRowsPerCta));
  if (w_bf16) launch_pdl(small_out_partials_kernel<true>, grid, kThreads, 0, s, x, x_stride, w, int(out), in, n, ws);
  else launch_pdl(small_out_partials_kernel<false>, grid, kThreads, 0, s, x, x_stride, w, int(out), in, n, ws);
}

void check_args(int64_t rows, int64_t out, int64_t in, int64_t x_stride, int64_t ws_doubles, int64_t chunks) {
  DSV4_CHECK(out > 0 && out <= kSmallOutMax, "small_out_linear: out ", out, " outside 1..", kSmallOutMax);
  DSV4_CHECK(in > 0 && x_stride >= in, "small_out_linear: in ", in, ", x_stride ", x_stride);
  const int64_t block = std::min<int64_t>(rows, kSmallOutRowBlock);
  DSV4_CHECK(ws_doubles >= chunks * block * out, "small_out_linear: workspace of ", ws_doubles, " doubles < ",
             chunks * block * out);
}

}  // namespace

int64_t small_out_linear_workspace(int64_t rows, int64_t out, int64_t in) {
  const int64_t chunks = (in + kChunk - 1) / kChunk;
  return chunks * std::min<int64_t>(rows, kSmallOutRowBlock) * out;
}

void small_out_linear(const float* x, int64_t rows, int64_t x_stride, const void* w, bool w_bf16, int64_t out,
                      int64_t in, double* ws, int64_t ws_doubles, float* y, cudaStream_t s) {
  if (rows == 0) return;
  const int64_t chunks = (in + kChunk - 1) / kChunk;
  check_args(rows, out, in, x_stride, ws_doubles, chunks);
  prof::Launch pl("hc_mix_linear", double(out) * in * (w_bf16 ? 2 : 4) + double(rows) * in * 4 + double(rows) * out * 4,
                  s, [&] { return "rows=" + std::to_string(rows) + " out=" + std::to_string(out) + " in=" + std::to_string(in); });
  const int64_t block = std::min<int64_t>(rows, kSmallOutRowBlock);
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min<int64_t>(block, rows - r0);
    launch_partials(x + r0 * x_stride, n, x_stride, w, w_bf16, out, in, chunks, ws, s);
    const int64_t warps = n * out;
    launch_pdl(small_out_reduce_kernel, unsigned((warps * 32 + kThreads - 1) / kThreads), kThreads, 0, s, ws, chunks, n,
               int(out), y + r0 * out);
  }
}

int64_t small_out_linear_partials(const float* x, int64_t rows, int64_t x_stride, const void* w, bool w_bf16,
                                  int64_t out, int64_t in, double* ws, int64_t ws_doubles, cudaStream_t s) {
  const int64_t chunks = (in + kChunk - 1) / kChunk;
  DSV4_CHECK(rows > 0 && rows <= kSmallOutRowBlock, "small_out_linear_partials: rows ", rows, " outside 1..",
             kSmallOutRowBlock);
  check_args(rows, out, in, x_stride, ws_doubles, chunks);
  prof::Launch pl("hc_mix_linear", double(out) * in * (w_bf16 ? 2 : 4) + double(rows) * in * 4 + double(rows) * out * 8,
                  s, [&] { return "rows=" + std::to_string(rows) + " out=" + std::to_string(out) + " in=" + std::to_string(in); });
  launch_partials(x, rows, x_stride, w, w_bf16, out, in, chunks, ws, s);
  return chunks;
}

}  // namespace dsv4::gpu
