// Small-output dense linear split over K (contract: ops.h, small_out_linear).
//
// The mHC projections are 24 (or 4) outputs × n_hc·D = 16384 inputs with fp32 weights: one
// row-tile kernel would put 2 CTAs on 132 SMs and walk K serially. Here kernel 1 cuts K into
// 256-wide chunks (one CTA per chunk × row group) and writes each chunk's double partials to a
// workspace (three variants with the same arithmetic: one chain per thread for ≤ 32 rows, 2 × 3
// register tiles for more, FP64 tensor-core MMAs from 128 rows with 13..24 outputs — prefill);
// kernel 2 adds a row's chunks with one warp per (row, output), or the consumer does
// (hc_pre_norm).
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
#include <mutex>
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

// The same partials for calls of ≥ kWideMinRows rows with 13..24 outputs (prefill's row blocks)
// on the FP64 tensor cores. `mma.sync m16n8k16 f64` computes each output as the chain
// c → fma(a0, b0, c) → … → fma(a15, b15, ·) in k order, rounding every step (H200 probe: every
// output of 4,194,304 equal to that chain, 34 % equal to the exact sum rounded once; the same for
// m8n8k4, m16n8k4 and m16n8k8 — m8n8k4 runs at half the others' 127 FMA / clock / SM), so the 16
// chain steps a quarter has in a 64-position sub-chunk are one MMA, and the chain is the vector
// kernels' chain.
// A CTA takes one chunk × kWideRows rows × all 24 (zero-padded) outputs, two CTAs per SM; warp w
// runs quarter q = w % 4 for rows 32·(w / 4) .. + 31 (2 m16-tiles × 3 n8-tiles: 24 doubles of
// accumulators). Shared memory:
//   weights as fp32 [o][q][64], outputs 260 floats apart (≡ 4 banks: a B fragment, 8 outputs
//     × 4 steps, hits 32 distinct banks), converted when a fragment is loaded (each feeds 2 MMAs);
//   x as doubles (each value converted once), four 64-position sub-chunks double-buffered through
//     registers: [row][q][16], rows 68 doubles apart (an A fragment's 16-lane phase, 4 rows × 4
//     steps, hits 16 distinct 8-byte banks).
// The four quarter sums meet as (s0 + s1) + (s2 + s3) through shared memory; the partials are
// the other two kernels' bit for bit. The weights are loaded before pdl_wait (parameters, never
// written by the step).
constexpr int kWideRows = 64, kSub = 64, kSubJ = kSub / kQuarters;  // 16 chain steps a quarter
constexpr int kWideWOut = kChunk + 4;              // weight output stride (floats): 260
constexpr int kWideXRow = kSub + 4;                // x row stride (doubles): 68
constexpr int kWideQsPad = kWideRows + 1;          // epilogue [q][o][row] stride
constexpr int kSubsPerChunk = kChunk / kSub;       // 4
constexpr int kWideXLoads = kWideRows * kSub / 4 / kThreads;  // float4 per thread per sub-chunk: 4
constexpr int64_t kWideMinRows = 128;
constexpr size_t kWideWBytes = sizeof(float) * kSmallOutMax * kWideWOut;   // 24,960
constexpr size_t kWideXDoubles = size_t(kWideRows) * kWideXRow;             // one buffer
constexpr size_t kWideSmem = kWideWBytes + sizeof(double) * 2 * kWideXDoubles;  // 94,592 B: 2 CTAs / SM
static_assert(kSmallOutMax == 24 && kThreads == 8 * 32 && kWideRows == 2 * 32 && kChunk == 4 * kSub &&
              kSmallOutMax * kChunk % (4 * kThreads) == 0 && kWideRows * kSub % (4 * kThreads) == 0 &&
              kWideWBytes % 16 == 0);
static_assert(size_t(kQuarters) * kSmallOutMax * kWideQsPad <= 2 * kWideXDoubles, "quarter sums must fit in x");

// Sub-chunk positions [k, k + 64) of rows r0 .. r0 + kWideRows (clamped to the call's rg rows)
// into registers: float4 f = threadIdx.x + 256·m is row f / 16, positions 4·(f % 16) .. + 3.
__device__ __forceinline__ void wide_load_x(float4 (&v)[kWideXLoads], const float* __restrict__ x,
                                            int64_t x_stride, int64_t r0, int rg, int64_t k) {
#pragma unroll
  for (int m = 0; m < kWideXLoads; ++m) {
    const int f = int(threadIdx.x) + kThreads * m, row = min(f >> 4, rg - 1);
    v[m] = __ldg(reinterpret_cast<const float4*>(x + (r0 + row) * x_stride + k) + (f & 15));
  }
}
// ... and into a staged buffer: position 4c + e of the sub-chunk is quarter e, chain step c.
__device__ __forceinline__ void wide_store_x(const float4 (&v)[kWideXLoads], double* buf) {
#pragma unroll
  for (int m = 0; m < kWideXLoads; ++m) {
    const int f = int(threadIdx.x) + kThreads * m, row = f >> 4, c = f & 15;
    double* d = buf + row * kWideXRow + c;
    d[0 * kSubJ] = v[m].x;
    d[1 * kSubJ] = v[m].y;
    d[2 * kSubJ] = v[m].z;
    d[3 * kSubJ] = v[m].w;
  }
}

template <bool kBf16>
__global__ void __launch_bounds__(kThreads, 2)
    small_out_partials_wide_kernel(const float* __restrict__ x,
                                   int64_t x_stride,
                                   const void* __restrict__ w,
                                   int out,
                                   int64_t in,
                                   int64_t rows,
                                   double* __restrict__ partial) {
  extern __shared__ __align__(16) double wide_smem[];
  float* wsf = reinterpret_cast<float*>(wide_smem);                              // [o][q][64], o stride 260
  double* xbuf = wide_smem + kWideWBytes / sizeof(double);                       // 2 × [row][q][16]
  const int64_t c = blockIdx.x, k0 = c * kChunk, r0 = int64_t(blockIdx.y) * kWideRows;
  const int rg = int(min(int64_t{kWideRows}, rows - r0));
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
  const int q = warp & 3, rbase = 32 * (warp >> 2);
  // The chunk's weights: 4 consecutive positions (one 16- or 8-byte load) are the 4 quarters of
  // one chain step; outputs ≥ out are zeros (their chains are never stored). Loads first.
  constexpr int kWLoads = kSmallOutMax * (kChunk / 4) / kThreads;  // 6
  float4 wv[kWLoads];
#pragma unroll
  for (int m = 0; m < kWLoads; ++m) {
    const int i = int(threadIdx.x) + kThreads * m, o = i / (kChunk / 4), step = i % (kChunk / 4);
    wv[m] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (o < out) {
      if constexpr (kBf16) {
        wv[m] = bf16x4_to_float4(__ldg(reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(w) + o * in + k0) + step));
      } else {
        wv[m] = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(w) + o * in + k0) + step);
      }
    }
  }
  pdl_wait();
  pdl_trigger();
  float4 xv[kWideXLoads];
  wide_load_x(xv, x, x_stride, r0, rg, k0);
#pragma unroll
  for (int m = 0; m < kWLoads; ++m) {
    const int i = int(threadIdx.x) + kThreads * m, o = i / (kChunk / 4), step = i % (kChunk / 4);
    float* d = wsf + o * kWideWOut + step;
    d[0 * (kChunk / 4)] = wv[m].x;
    d[1 * (kChunk / 4)] = wv[m].y;
    d[2 * (kChunk / 4)] = wv[m].z;
    d[3 * (kChunk / 4)] = wv[m].w;
  }
  wide_store_x(xv, xbuf);
  __syncthreads();
  double acc[2][3][4] = {};  // [m-tile][n-tile]: rows rbase + 16·mt + g (+ 8), outputs 8·nt + 2t + {0, 1}
  const float* wb = wsf + g * kWideWOut + q * (kChunk / 4) + t;
  for (int s = 0; s < kSubsPerChunk; ++s) {
    if (s + 1 < kSubsPerChunk) wide_load_x(xv, x, x_stride, r0, rg, k0 + (s + 1) * kSub);
    // One MMA per (m-tile, n-tile) takes the sub-chunk's 16 chain steps of quarter q.
    const double* xa = xbuf + (s & 1) * kWideXDoubles + (rbase + g) * kWideXRow + q * kSubJ + t;
    double b[3][4];
#pragma unroll
    for (int nt = 0; nt < 3; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) b[nt][i] = wb[nt * 8 * kWideWOut + s * kSubJ + 4 * i];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      double a[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) a[i] = xa[(16 * mt + 8 * (i % 2)) * kWideXRow + 4 * (i / 2)];
#pragma unroll
      for (int nt = 0; nt < 3; ++nt) dmma_m16n8k16(acc[mt][nt], a, b[nt]);
    }
    if (s + 1 < kSubsPerChunk) wide_store_x(xv, xbuf + ((s + 1) & 1) * kWideXDoubles);
    __syncthreads();
  }
  // Quarter sums [q][o][row] over the x buffers (every read of them is behind the last barrier),
  // then the chunk values (s0 + s1) + (s2 + s3), pair-major like the other kernels.
  double* qs = xbuf;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 3; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        qs[(q * kSmallOutMax + 8 * nt + 2 * t + (i & 1)) * kWideQsPad + rbase + 16 * mt + 8 * (i >> 1) + g] =
            acc[mt][nt][i];
  __syncthreads();
  constexpr int kQ = kSmallOutMax * kWideQsPad;
  for (int pair = threadIdx.x; pair < rg * out; pair += kThreads) {
    const int o = pair % out, r = pair / out;
    const double* p = qs + o * kWideQsPad + r;
    partial[(c * rows + r0 + r) * out + o] = (p[0] + p[kQ]) + (p[2 * kQ] + p[3 * kQ]);
  }
}

template <bool kBf16>
void launch_partials_wide(const float* x, int64_t n, int64_t x_stride, const void* w, int64_t out, int64_t in,
                          int64_t chunks, double* ws, cudaStream_t s) {
  static std::once_flag attr_set[kMaxDevices];  // cudaFuncSetAttribute is per device (TP ranks)
  call_once_per_device(attr_set, [] {
    CUDA_CHECK(cudaFuncSetAttribute(small_out_partials_wide_kernel<kBf16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kWideSmem)));
  });
  const dim3 grid{unsigned(chunks), unsigned((n + kWideRows - 1) / kWideRows)};
  launch_pdl(small_out_partials_wide_kernel<kBf16>, grid, kThreads, kWideSmem, s, x, x_stride, w, int(out), in, n, ws);
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
  if (n >= kWideMinRows && out > kSmallOutMax / 2 && in % kChunk == 0 && x_stride % 4 == 0 && aligned16(x) && aligned16(w)) {
    if (w_bf16) launch_partials_wide<true>(x, n, x_stride, w, out, in, chunks, ws, s);
    else launch_partials_wide<false>(x, n, x_stride, w, out, in, chunks, ws, s);
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
