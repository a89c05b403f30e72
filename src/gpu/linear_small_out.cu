// Small-output dense linear split over K (contract: ops.h, small_out_linear).
//
// The mHC projections are 24 (or 4) outputs × n_hc·D = 16384 inputs with fp32 weights: one
// row-tile kernel would put 2 CTAs on 132 SMs and walk K serially. Here kernel 1 cuts K into
// 256-wide chunks (one CTA per chunk × row group) and writes each chunk's double partials to a
// workspace (two variants with the same arithmetic: one chain per thread for ≤ 32 rows, 2 × 3
// register tiles for more); kernel 2 adds a row's chunks with one warp per (row, output), or the
// consumer does (hc_pre_norm).
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
#include <cstdint>
#include <type_traits>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_small_out.cuh"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kChunk = 256;        // K per chunk (per CTA)
constexpr int kHalf = kChunk / 2;  // K staged in shared memory at a time
constexpr int kQuarters = 4;       // independent chains per chunk
constexpr int kPad = kHalf + 4;    // smem row stride (doubles): conflict-free 64-bit loads
constexpr int kRowsPerCta = 16;
constexpr int kRowTile = 2,
              kOutTile = 3;  // a thread's register tile: 2 rows × 3 outputs (one quarter)
constexpr int kOutTiles = kSmallOutMax / kOutTile;
constexpr int kThreads = kQuarters * kOutTiles * (kRowsPerCta / kRowTile);  // 256
static_assert(kSmallOutMax % kOutTile == 0 && kRowsPerCta % kRowTile == 0 && kThreads == 256);

// Copies nrows × width values (row r at src + r · stride, elements of type S: float or bf16 bits)
// into shared rows of `pad` elements of T (exact), with 16-byte loads, each thread issuing up to
// kBatch of them before storing any: one memory round trip per batch instead of one per value
// (the scalar loop's loads each waited for the previous store). Needs width % (16 / sizeof(S))
// == 0 and 16-byte aligned rows; the values and their places are the scalar loop's.
template <class S, class T>
__device__ __forceinline__ void stage_rows_vec(T* dst, int pad, int width, const S* __restrict__ src,
                                               int64_t stride, int nrows) {
  constexpr int kPer = 16 / int(sizeof(S)), kBatch = 8;
  const int vpr = width / kPer, total = nrows * vpr;
  for (int base = 0; base < total; base += kThreads * kBatch) {
    uint4 v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads + int(threadIdx.x);
      if (i < total) v[j] = __ldg(reinterpret_cast<const uint4*>(src + (i / vpr) * stride) + i % vpr);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads + int(threadIdx.x);
      if (i >= total) continue;
      T* d = dst + (i / vpr) * pad + (i % vpr) * kPer;
      const uint32_t u[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        float f;
        if constexpr (sizeof(S) == 4) f = __uint_as_float(u[e]);
        else f = __uint_as_float(((u[e / 2] >> (16 * (e & 1))) & 0xffffu) << 16);
        d[e] = T(f);
      }
    }
  }
}

// Stages `width` K positions from k0 (kn of them valid, the rest 0) of the weights [out, in] and
// of x rows r0 .. r0 + rg into shared rows of `pad` elements (T: float or double; exact).
template <bool kBf16, class T>
__device__ __forceinline__ void stage_chunk(T* wdst,
                                            T* xdst,
                                            int pad,
                                            int width,
                                            const void* __restrict__ w,
                                            int out,
                                            int64_t in,
                                            const float* __restrict__ x,
                                            int64_t x_stride,
                                            int64_t r0,
                                            int rg,
                                            int64_t k0,
                                            int kn) {
  using S = std::conditional_t<kBf16, uint16_t, float>;
  const S* w0 = static_cast<const S*>(w) + k0;
  const float* x0 = x + r0 * x_stride + k0;
  if (kn == width && width % 8 == 0 && in % 8 == 0 && x_stride % 4 == 0 && aligned16(w0) && aligned16(x0)) {
    stage_rows_vec(wdst, pad, width, w0, in, out);  // every position valid: the common case
    stage_rows_vec(xdst, pad, width, x0, x_stride, rg);
    return;
  }
  for (int i = threadIdx.x; i < out * width; i += kThreads) {
    const int o = i / width, k = i % width;
    float v = 0.0f;
    if (k < kn) {
      if (kBf16)
        v = __uint_as_float(uint32_t(static_cast<const uint16_t*>(w)[o * in + k0 + k]) << 16);
      else
        v = __ldg(static_cast<const float*>(w) + o * in + k0 + k);
    }
    wdst[o * pad + k] = T(v);
  }
  for (int i = threadIdx.x; i < rg * width; i += kThreads) {
    const int r = i / width, k = i % width;
    xdst[r * pad + k] = T(k < kn ? __ldg(x + (r0 + r) * x_stride + k0 + k) : 0.0f);
  }
}

// After a __syncthreads: the chunk value of each (row, output) pair of this CTA,
// (s0 + s1) + (s2 + s3) of its quarter sums qs [pair = r · out + o][quarter], into
// partial[(c · rows + r0 + r) · out + o].
__device__ __forceinline__ void store_chunk_partials(const double* qs,
                                                     int out,
                                                     int rg,
                                                     int64_t c,
                                                     int64_t rows,
                                                     int64_t r0,
                                                     double* __restrict__ partial) {
  for (int pair = threadIdx.x; pair < out * rg; pair += kThreads) {
    const int o = pair % out, r = pair / out;
    const double* qp = qs + pair * kQuarters;
    partial[(c * rows + r0 + r) * out + o] = (qp[0] + qp[1]) + (qp[2] + qp[3]);
  }
}

// partial[(c · rows + r) · out + o] for the rows [r0, r0 + rows_here) of this call. The chunk's
// weights and x rows are staged as doubles, half a chunk at a time (each value converted once;
// the chains continue across the halves, so the order is the file comment's). Thread (q, output
// triple, row pair) keeps 6 chains in registers: 5 shared loads feed 6 FMAs.
template <bool kBf16>
__global__ void __launch_bounds__(kThreads)
    small_out_partials_kernel(const float* __restrict__ x,
                              int64_t x_stride,
                              const void* __restrict__ w,
                              int out,
                              int64_t in,
                              int64_t rows,
                              double* __restrict__ partial) {
  pdl_wait();
  pdl_trigger();
  __shared__ double ws[kSmallOutMax * kPad];  // [o][k]; after the last half: qs [pair][quarter]
  __shared__ double xs[kRowsPerCta][kPad];
  static_assert(kSmallOutMax * kRowsPerCta * kQuarters <= kSmallOutMax * kPad, "qs must fit in ws");
  const int64_t c = blockIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * kRowsPerCta;
  const int rg = int(min(int64_t{kRowsPerCta}, rows - r0));
  const int q = threadIdx.x % kQuarters, ot = (threadIdx.x / kQuarters) % kOutTiles,
            rp = threadIdx.x / (kQuarters * kOutTiles);
  const int o0 = ot * kOutTile, ra = rp * kRowTile;
  const bool active = o0 < out && ra < rg;  // a warp is one row pair: the row test is warp-uniform
  double acc[kRowTile][kOutTile] = {};
  for (int h = 0; h < 2; ++h) {
    const int64_t k0 = c * kChunk + h * kHalf;
    const int kn = int(max(int64_t{0}, min(int64_t{kHalf}, in - k0)));
    stage_chunk<kBf16>(ws, &xs[0][0], kPad, kHalf, w, out, in, x, x_stride, r0, rg, k0, kn);
    __syncthreads();
    if (active) {
      // Rows / outputs past the end read row ra / output o0 (valid) and are never stored.
      const double* xr[kRowTile];
      const double* wr[kOutTile];
#pragma unroll
      for (int i = 0; i < kRowTile; ++i) xr[i] = xs[min(ra + i, rg - 1)];
#pragma unroll
      for (int i = 0; i < kOutTile; ++i) wr[i] = ws + min(o0 + i, out - 1) * kPad;
#pragma unroll 4
      for (int j = 0; j < kHalf / kQuarters; ++j) {
        const int k = j * kQuarters + q;
        double xv[kRowTile], wv[kOutTile];
#pragma unroll
        for (int i = 0; i < kRowTile; ++i) xv[i] = xr[i][k];
#pragma unroll
        for (int i = 0; i < kOutTile; ++i) wv[i] = wr[i][k];
#pragma unroll
        for (int a = 0; a < kRowTile; ++a)
#pragma unroll
          for (int b = 0; b < kOutTile; ++b) acc[a][b] = __fma_rn(xv[a], wv[b], acc[a][b]);
      }
    }
    __syncthreads();
  }
  double* qs = ws;  // [pair = r · out + o][quarter]
  if (active) {
#pragma unroll
    for (int a = 0; a < kRowTile; ++a)
#pragma unroll
      for (int b = 0; b < kOutTile; ++b)
        if (ra + a < rg && o0 + b < out) qs[((ra + a) * out + o0 + b) * kQuarters + q] = acc[a][b];
  }
  __syncthreads();
  store_chunk_partials(qs, out, rg, c, rows, r0, partial);
}

// The same partials for calls of ≤ kNarrowMaxRows rows (decode): one thread per (row, output,
// quarter) chain over the whole chunk staged as floats, so a 1-row call still runs 96 chains per
// CTA (the register-tiled kernel would give it one warp). Same operations in the same order per
// output: the two kernels' partials are bit-identical.
constexpr int kNarrowRows = 8;
constexpr int kNarrowPad = kChunk + 4;  // floats
constexpr int64_t kNarrowMaxRows = 32;
template <bool kBf16>
__global__ void __launch_bounds__(kThreads)
    small_out_partials_narrow_kernel(const float* __restrict__ x,
                                     int64_t x_stride,
                                     const void* __restrict__ w,
                                     int out,
                                     int64_t in,
                                     int64_t rows,
                                     double* __restrict__ partial) {
  pdl_wait();
  pdl_trigger();
  __shared__ float ws[kSmallOutMax][kNarrowPad];
  __shared__ float xs[kNarrowRows][kNarrowPad];
  __shared__ double qs[kSmallOutMax * kNarrowRows][kQuarters];
  const int64_t c = blockIdx.x, k0 = c * kChunk;
  const int kn = int(min(int64_t{kChunk}, in - k0));
  const int64_t r0 = int64_t(blockIdx.y) * kNarrowRows;
  const int rg = int(min(int64_t{kNarrowRows}, rows - r0));
  stage_chunk<kBf16>(
      &ws[0][0], &xs[0][0], kNarrowPad, kChunk, w, out, in, x, x_stride, r0, rg, k0, kn);
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
  store_chunk_partials(&qs[0][0], out, rg, c, rows, r0, partial);
}

// One warp per (row, output): y[r · out + o] = fp32(Σ chunks) in the order of the file comment.
__global__ void __launch_bounds__(kThreads)
    small_out_reduce_kernel(const double* __restrict__ partial,
                            int64_t chunks,
                            int64_t rows,
                            int out,
                            float* __restrict__ y) {
  pdl_wait();
  pdl_trigger();
  const int64_t pair = (int64_t(blockIdx.x) * kThreads + threadIdx.x) >> 5;
  if (pair >= rows * out) return;  // warp-uniform
  const double v = small_out_reduce_warp(partial, chunks, rows * out, pair);
  if ((threadIdx.x & 31) == 0) y[pair] = float(v);
}

void launch_partials(const float* x,
                     int64_t n,
                     int64_t x_stride,
                     const void* w,
                     bool w_bf16,
                     int64_t out,
                     int64_t in,
                     int64_t chunks,
                     double* ws,
                     cudaStream_t s) {
  if (n <= kNarrowMaxRows) {
    const dim3 grid(unsigned(chunks), unsigned((n + kNarrowRows - 1) / kNarrowRows));
    if (w_bf16)
      launch_pdl(small_out_partials_narrow_kernel<true>,
                 grid,
                 kThreads,
                 0,
                 s,
                 x,
                 x_stride,
                 w,
                 int(out),
                 in,
                 n,
                 ws);
    else
      launch_pdl(small_out_partials_narrow_kernel<false>,
                 grid,
                 kThreads,
                 0,
                 s,
                 x,
                 x_stride,
                 w,
                 int(out),
                 in,
                 n,
                 ws);
    return;
  }
  const dim3 grid(unsigned(chunks), unsigned((n + kRowsPerCta - 1) / kRowsPerCta));
  if (w_bf16)
    launch_pdl(
        small_out_partials_kernel<true>, grid, kThreads, 0, s, x, x_stride, w, int(out), in, n, ws);
  else
    launch_pdl(small_out_partials_kernel<false>,
               grid,
               kThreads,
               0,
               s,
               x,
               x_stride,
               w,
               int(out),
               in,
               n,
               ws);
}

void check_args(
    int64_t rows, int64_t out, int64_t in, int64_t x_stride, int64_t ws_doubles, int64_t chunks) {
  DSV4_CHECK(
      out > 0 && out <= kSmallOutMax, "small_out_linear: out ", out, " outside 1..", kSmallOutMax);
  DSV4_CHECK(in > 0 && x_stride >= in, "small_out_linear: in ", in, ", x_stride ", x_stride);
  const int64_t block = std::min<int64_t>(rows, kSmallOutRowBlock);
  DSV4_CHECK(ws_doubles >= chunks * block * out,
             "small_out_linear: workspace of ",
             ws_doubles,
             " doubles < ",
             chunks * block * out);
}

}  // namespace

int64_t small_out_linear_workspace(int64_t rows, int64_t out, int64_t in) {
  const int64_t chunks = (in + kChunk - 1) / kChunk;
  return chunks * std::min<int64_t>(rows, kSmallOutRowBlock) * out;
}

void small_out_linear(const float* x,
                      int64_t rows,
                      int64_t x_stride,
                      const void* w,
                      bool w_bf16,
                      int64_t out,
                      int64_t in,
                      double* ws,
                      int64_t ws_doubles,
                      float* y,
                      cudaStream_t s) {
  if (rows == 0) return;
  const int64_t chunks = (in + kChunk - 1) / kChunk;
  check_args(rows, out, in, x_stride, ws_doubles, chunks);
  prof::Launch pl(
      "hc_mix_linear",
      double(out) * in * (w_bf16 ? 2 : 4) + double(rows) * in * 4 + double(rows) * out * 4,
      s,
      [&] {
        return "rows=" + std::to_string(rows) + " out=" + std::to_string(out) +
               " in=" + std::to_string(in);
      });
  const int64_t block = std::min<int64_t>(rows, kSmallOutRowBlock);
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min<int64_t>(block, rows - r0);
    launch_partials(x + r0 * x_stride, n, x_stride, w, w_bf16, out, in, chunks, ws, s);
    const int64_t warps = n * out;
    launch_pdl(small_out_reduce_kernel,
               unsigned((warps * 32 + kThreads - 1) / kThreads),
               kThreads,
               0,
               s,
               ws,
               chunks,
               n,
               int(out),
               y + r0 * out);
  }
}

int64_t small_out_linear_partials(const float* x,
                                  int64_t rows,
                                  int64_t x_stride,
                                  const void* w,
                                  bool w_bf16,
                                  int64_t out,
                                  int64_t in,
                                  double* ws,
                                  int64_t ws_doubles,
                                  cudaStream_t s) {
  const int64_t chunks = (in + kChunk - 1) / kChunk;
  DSV4_CHECK(rows > 0 && rows <= kSmallOutRowBlock,
             "small_out_linear_partials: rows ",
             rows,
             " outside 1..",
             kSmallOutRowBlock);
  check_args(rows, out, in, x_stride, ws_doubles, chunks);
  prof::Launch pl(
      "hc_mix_linear",
      double(out) * in * (w_bf16 ? 2 : 4) + double(rows) * in * 4 + double(rows) * out * 8,
      s,
      [&] {
        return "rows=" + std::to_string(rows) + " out=" + std::to_string(out) +
               " in=" + std::to_string(in);
      });
  launch_partials(x, rows, x_stride, w, w_bf16, out, in, chunks, ws, s);
  return chunks;
}

}  // namespace dsv4::gpu
