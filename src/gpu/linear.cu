// Linear layers and RMSNorm of the CUDA backend. Non-expert lin8 and bf16 dense linears of every
// row count take the tensor-core kernels of linear_mma*.cu (tolerance-equal to the CPU, bitwise
// batch-invariant; docs/decode-linears.md). This file keeps: expert-indexed lin8 and lin4 (the
// general kernels), fp32-weight dense linears (skinny kernel for rows ≤ 64, else general), and
// the odd shapes the tensor-core path declines (in % 128 != 0, unaligned pointers).
//
// General design: one warp per (input row, output row). Lin8 walks the 128-wide K blocks in order;
// each lane multiplies 4 e4m3 pairs (exact in fp32), the warp sums them in double (exact:
// e4m3 products span < 2^36 and 128 of them fit in 53 bits, so the order does not matter),
// and every lane adds fp32(partial)·(s_x·s_w) to its accumulator in K order — bit-identical
// to cpu::Fp8Linear. Lin4 does four 32-wide blocks per iteration (8 lanes each) and adds them
// in order. Dense linears accumulate in double and round once (like the CPU, up to the last
// bit of a double). Shapes: x [rows, in], y [rows, out]; see ops.h.
#include <algorithm>
#include <cstdint>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_mma.h"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"
#include "gpu/row_ops.cuh"

namespace dsv4::gpu {
namespace {

constexpr int kWarps = 8;

__global__ void quantize_q8_kernel(const float* __restrict__ x, int64_t blocks_per_row, int64_t in,
                                   int64_t total_blocks, uint8_t* __restrict__ codes,
                                   float* __restrict__ scales) {
  pdl_wait();
  pdl_trigger();
  const int64_t b = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (b >= total_blocks) return;
  const int lane = threadIdx.x & 31;
  const int64_t row = b / blocks_per_row, kb = b % blocks_per_row;
  const float* xb = x + row * in + kb * 128;
  float v[4];
  for (int i = 0; i < 4; ++i) v[i] = xb[lane * 4 + i];
  q8_quantize_block_warp(v, lane, codes + row * in + kb * 128, scales + b);
}

__global__ void lin8_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs,
                            int x_row_div, const uint8_t* __restrict__ w,
                            const uint8_t* __restrict__ ws, int64_t out, int64_t in,
                            const int32_t* __restrict__ ids, float* __restrict__ y, bool round_out) {
  pdl_wait();
  pdl_trigger();
  const int64_t o = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (o >= out) return;
  const int64_t r = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int64_t xr = r / x_row_div;
  const int64_t kblocks = in / 128, scols = (in + 127) / 128, srows = (out + 127) / 128;
  const int64_t e = ids ? ids[r] : 0;
  const uint8_t* wrow = w + (e * out + o) * in;
  const uint8_t* srow = ws + e * srows * scols + (o / 128) * scols;
  const uint8_t* xrow = xq + xr * in;
  const float* sxr = xs + xr * kblocks;
  float acc = 0.0f;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const uchar4 wv = *reinterpret_cast<const uchar4*>(wrow + kb * 128 + lane * 4);
    const uchar4 xv = *reinterpret_cast<const uchar4*>(xrow + kb * 128 + lane * 4);
    double p = double(e4m3_to_float(xv.x) * e4m3_to_float(wv.x));
    p += double(e4m3_to_float(xv.y) * e4m3_to_float(wv.y));
    p += double(e4m3_to_float(xv.z) * e4m3_to_float(wv.z));
    p += double(e4m3_to_float(xv.w) * e4m3_to_float(wv.w));
    p = warp_sum(p);
    acc += float(p) * (sxr[kb] * e8m0_to_float(srow[kb]));
  }
  if (lane == 0) y[r * out + o] = round_out ? round_bf16(acc) : acc;
}

__global__ void lin4_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs,
                            int x_row_div, const uint8_t* __restrict__ w,
                            const uint8_t* __restrict__ ws, int64_t out, int64_t in,
                            const int32_t* __restrict__ ids, float* __restrict__ y, bool round_out) {
  pdl_wait();
  pdl_trigger();
  const int64_t o = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (o >= out) return;
  const int64_t r = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int64_t xr = r / x_row_div;
  const int64_t kb32 = in / 32;
  const int64_t e = ids ? ids[r] : 0;
  const uint8_t* wrow = w + (e * out + o) * (in / 2);
  const uint8_t* srow = ws + (e * out + o) * kb32;
  const uint8_t* xrow = xq + xr * in;
  const float* sxr = xs + xr * (in / 128);
  float acc = 0.0f;
  for (int64_t it = 0; it < in / 128; ++it) {
    const uchar2 wv = *reinterpret_cast<const uchar2*>(wrow + it * 64 + lane * 2);
    const uchar4 xv = *reinterpret_cast<const uchar4*>(xrow + it * 128 + lane * 4);
    double p = double(e4m3_to_float(xv.x) * e2m1_to_float(wv.x & 0xf));
    p += double(e4m3_to_float(xv.y) * e2m1_to_float(wv.x >> 4));
    p += double(e4m3_to_float(xv.z) * e2m1_to_float(wv.y & 0xf));
    p += double(e4m3_to_float(xv.w) * e2m1_to_float(wv.y >> 4));
    for (int off = 4; off > 0; off >>= 1) p += __shfl_xor_sync(0xffffffffu, p, off);
    const float sx = sxr[it];
    for (int j = 0; j < 4; ++j) {
      const double pj = __shfl_sync(0xffffffffu, p, j * 8);
      acc += (float(pj) * sx) * e8m0_to_float(srow[it * 4 + j]);
    }
  }
  if (lane == 0) y[r * out + o] = round_out ? round_bf16(acc) : acc;
}

__global__ void dense_kernel(const float* __restrict__ x, int64_t x_stride, const void* __restrict__ w,
                             bool w_bf16, int64_t out, int64_t in, int64_t out_per_group,
                             bool round, float post_scale, float* __restrict__ y) {
  pdl_wait();
  pdl_trigger();
  const int64_t o = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (o >= out) return;
  const int64_t r = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const float* xr = x + r * x_stride + (out_per_group > 0 ? (o / out_per_group) * in : 0);
  double acc = 0.0;
  if (w_bf16) {
    const uint16_t* wr = static_cast<const uint16_t*>(w) + o * in;
    for (int64_t k = lane; k < in; k += 32) acc += double(xr[k]) * double(bf16_bits_to_float(wr[k]));
  } else {
    const float* wr = static_cast<const float*>(w) + o * in;
    for (int64_t k = lane; k < in; k += 32) acc += double(xr[k]) * double(wr[k]);
  }
  acc = warp_sum(acc);
  if (lane == 0) {
    float v = float(acc);
    if (round) v = round_bf16(v);
    if (post_scale != 0.0f) v = round_bf16(v * post_scale);
    y[r * out + o] = v;
  }
}

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t dim,
                                float eps, float* __restrict__ y) {
  pdl_wait();
  pdl_trigger();
  __shared__ double red[32];
  const float* xr = x + int64_t(blockIdx.x) * dim;
  double ss = 0.0;
  for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) ss += double(xr[k]) * double(xr[k]);
  ss = block_sum(ss, red);
  const float ms = float(ss / double(dim));
  const float rs = 1.0f / sqrtf(ms + eps);
  float* yr = y + int64_t(blockIdx.x) * dim;
  for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) yr[k] = round_bf16(w[k] * (xr[k] * rs));
}

// ---- Skinny (small-M) streaming kernel: the dense linears the tensor-core path declines ------
// (fp32 weights, bf16 odd shapes) at decode batch sizes.
//
// Layout: a CTA owns a tile of `rpc` output rows (inside one group for grouped dense) and all
// K; warp w owns the 512-wide K slices w, w + nwarps, ...; lane l owns the 16 K positions
// slice·512 + 16·l (two bf16 or four fp32 16-byte loads per weight row). For a group of MT input
// rows the lane's x values are converted to double once and stay in registers while the warp
// streams every output row of the tile through them, so each weight byte is read once per MT
// rows (M > MT re-reads the CTA's tile from L2, not HBM).
// Numerics: double products (exact: bf16·bf16 and bf16·fp32 fit 53 bits) summed in double per
// lane, per warp (xor tree) and across the warp's slices and then the CTA's warps in a fixed
// order; deterministic, equal to the CPU up to the last bit of a double like the general kernel.
enum WeightKind { kBf16 = 1, kF32 = 2 };
constexpr int kSkinnyMaxRows = 64;
constexpr int kSlice = 512, kLaneK = 16, kMaxWarps = 8;

template <int WT>
struct WeightChunk;  // one lane's 16 weights of one output row, as loaded
template <>
struct WeightChunk<kBf16> {
  uint4 v[2];
  __device__ void load(const void* row, int64_t k0) {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(row) + k0);
    v[0] = __ldg(p);
    v[1] = __ldg(p + 1);
  }
  __device__ double get(int i) const {
    const uint4& q = v[i >> 3];
    const int j = i & 7;
    const uint32_t w = j < 2 ? q.x : j < 4 ? q.y : j < 6 ? q.z : q.w;
    return double(__uint_as_float((j & 1) ? (w & 0xffff0000u) : (w << 16)));
  }
};
template <>
struct WeightChunk<kF32> {
  float4 v[4];
  __device__ void load(const void* row, int64_t k0) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(row) + k0);
    for (int i = 0; i < 4; ++i) v[i] = __ldg(p + i);
  }
  __device__ double get(int i) const {
    const float4& q = v[i >> 2];
    const int j = i & 3;
    return double(j == 0 ? q.x : j == 1 ? q.y : j == 2 ? q.z : q.w);
  }
};

struct SkinnyArgs {
  const float* x;        // fp32 [rows, x_stride]
  int64_t x_stride;
  const void* w;         // [out, in]
  int64_t rows, out, in;
  int64_t opg;           // output rows per group (= out when not grouped)
  int64_t tiles_per_group;
  int rpc;               // output rows per CTA
  bool round;            // round_bf16
  float post_scale;
  float* y;
};

__host__ __device__ constexpr int kRowsInFlight(int wt, int mt) { return (wt == kBf16 ? 4 : 2) / mt; }

template <int WT, int MT>
__global__ void __launch_bounds__(kMaxWarps * 32, 2) skinny_kernel(SkinnyArgs a) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) unsigned char smem[];
  double* parts = reinterpret_cast<double*>(smem);  // partials [MT][rpc][nwarps]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t g = blockIdx.x / a.tiles_per_group, tile = blockIdx.x % a.tiles_per_group;
  const int64_t o_begin = g * a.opg + tile * a.rpc;
  const int nrows_tile = int(min(int64_t(a.rpc), (g + 1) * a.opg - o_begin));
  const int64_t nslices = (a.in + kSlice - 1) / kSlice;
  constexpr int64_t es = WT == kBf16 ? 2 : 4;  // weight element bytes
  {  // Start the tile's weights towards L2 (rows are contiguous).
    const char* tile_w = static_cast<const char*>(a.w) + o_begin * a.in * es;
    const int64_t lines = (int64_t(nrows_tile) * a.in * es + 127) / 128;
    for (int64_t l = threadIdx.x; l < lines && l < 32 * int64_t(blockDim.x); l += blockDim.x)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(tile_w + l * 128));
  }
  constexpr int RIF = kRowsInFlight(WT, MT);

  for (int64_t m0 = 0; m0 < a.rows; m0 += MT) {
    const int mt = int(min(int64_t(MT), a.rows - m0));
    for (int i = threadIdx.x; i < MT * a.rpc * nwarps; i += blockDim.x) parts[i] = 0.0;
    __syncthreads();
    for (int64_t sl = warp; sl < nslices; sl += nwarps) {
      const int64_t k0 = sl * kSlice + lane * kLaneK;
      const bool active = k0 < a.in;
      // This lane's x values for the MT rows, as double.
      double xd[MT][kLaneK];
      for (int mi = 0; mi < MT; ++mi) {
        const int64_t r = m0 + min(mi, mt - 1);
        const float* xp = a.x + r * a.x_stride + g * a.in + k0;
        for (int q = 0; q < 4; ++q) {
          float4 v = make_float4(0, 0, 0, 0);
          if (active) v = __ldg(reinterpret_cast<const float4*>(xp) + q);
          xd[mi][4 * q] = v.x;
          xd[mi][4 * q + 1] = v.y;
          xd[mi][4 * q + 2] = v.z;
          xd[mi][4 * q + 3] = v.w;
        }
      }
      for (int ol0 = 0; ol0 < nrows_tile; ol0 += RIF) {
        WeightChunk<WT> wc[RIF];
#pragma unroll
        for (int j = 0; j < RIF; ++j)
          if (active && ol0 + j < nrows_tile) {
            const int64_t o = o_begin + ol0 + j;
            wc[j].load(static_cast<const unsigned char*>(a.w) + o * a.in * es, k0);
          }
#pragma unroll
        for (int j = 0; j < RIF; ++j) {
          if (ol0 + j >= nrows_tile) break;  // warp-uniform
          double p[MT];
          for (int mi = 0; mi < MT; ++mi) p[mi] = 0.0;
          if (active) {
#pragma unroll
            for (int i = 0; i < kLaneK; ++i) {
              const double wd = wc[j].get(i);
              for (int mi = 0; mi < MT; ++mi) p[mi] = __fma_rn(xd[mi][i], wd, p[mi]);
            }
          }
          const int ol = ol0 + j;
          for (int mi = 0; mi < MT; ++mi) {
            const double v = warp_sum(p[mi]);
            if (lane == 0) parts[(mi * a.rpc + ol) * nwarps + warp] += v;
          }
        }
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < mt * nrows_tile; i += blockDim.x) {
      const int mi = i / nrows_tile, ol = i % nrows_tile;
      const int64_t r = m0 + mi, o = o_begin + ol;
      const double* pp = parts + (mi * a.rpc + ol) * nwarps;
      double acc = 0.0;
      for (int w = 0; w < nwarps; ++w) acc += pp[w];
      float v = float(acc);
      if (a.round) v = round_bf16(v);
      if (a.post_scale != 0.0f) v = round_bf16(v * a.post_scale);
      a.y[r * a.out + o] = v;
    }
    __syncthreads();
  }
}

// Launch shape: warps = K slices (≤ 16), rows per CTA so that ~2 CTAs per SM exist, capped by
// the shared memory for the per-row reduction buffer.
template <int WT>
void launch_skinny(SkinnyArgs a, cudaStream_t s) {
  static int sms = 0;
  if (sms == 0) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  }
  const int64_t nslices = (a.in + kSlice - 1) / kSlice;
  const int nwarps = int(std::min<int64_t>(kMaxWarps, nslices));
  const int MT = a.rows == 1 ? 1 : 2;
  const int64_t groups = a.out / a.opg;
  const int64_t per_red = int64_t(MT) * nwarps * 8;
  const int64_t budget = 48 * 1024;
  int64_t rpc = (a.out + 2 * sms - 1) / (2 * sms);
  rpc = std::max<int64_t>(1, std::min<int64_t>({rpc, 64, a.opg, budget / per_red}));
  a.rpc = int(rpc);
  a.tiles_per_group = (a.opg + rpc - 1) / rpc;
  const size_t smem = size_t(rpc * per_red);
  const dim3 grid(static_cast<unsigned>(groups * a.tiles_per_group));
  if (MT == 1) launch_pdl(skinny_kernel<WT, 1>, grid, nwarps * 32, smem, s, a);
  else launch_pdl(skinny_kernel<WT, 2>, grid, nwarps * 32, smem, s, a);
}

// RMSNorm with the row held in registers: VPT float4 per thread (dim ≤ VPT·4·256), one read of
// x and w, all loads issued before the block reduction (the strided loop of rms_norm_kernel
// waited on one load round trip per few elements). Double sum in a fixed block order.
template <int VPT>
__global__ void __launch_bounds__(256) rms_norm_vec_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                           int64_t dim, float eps, float* __restrict__ y) {
  float4 wv[VPT];
  rms_norm_weights<VPT>(w, dim, wv);  // before the wait: weights
  pdl_wait();
  pdl_trigger();
  __shared__ double red[32];
  float4 v[VPT];
  rms_norm_row_regs<VPT>(x + int64_t(blockIdx.x) * dim, wv, dim, eps, v, red);
  float4* yr = reinterpret_cast<float4*>(y + int64_t(blockIdx.x) * dim);
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * blockDim.x;
    if (j < dim / 4) yr[j] = v[i];
  }
}

// Thread i widens codes [16i, 16i + 16) of the row-major [out, in] weight (in % 16 == 0: one row,
// one 128-column block) to bf16(code·scale) with the loader's formula and rounding
// (numerics::float_to_bf16_bits of e4m3_to_float(code)·e8m0_to_float(scale), here round_bf16).
__global__ void __launch_bounds__(256) widen_fp8_tiles_kernel(const uint8_t* __restrict__ w,
                                                              const uint8_t* __restrict__ ws, int64_t in,
                                                              int64_t vecs, uint16_t* __restrict__ dst) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= vecs) return;
  const int64_t o = i * 16 / in, c = i * 16 % in;
  const float sc = e8m0_to_float(ws[(o / 128) * ((in + 127) / 128) + c / 128]);
  const uint4 v = reinterpret_cast<const uint4*>(w)[i];
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  uint32_t r[8];  // r[j]: codes 2j (low half) and 2j + 1
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t pair = words[j / 2] >> (16 * (j % 2));
    const uint16_t lo = bf16_bits(round_bf16(e4m3_to_float(uint8_t(pair)) * sc));
    const uint16_t hi = bf16_bits(round_bf16(e4m3_to_float(uint8_t(pair >> 8)) * sc));
    r[j] = lo | uint32_t{hi} << 16;
  }
  uint4* d = reinterpret_cast<uint4*>(dst) + 2 * i;
  d[0] = make_uint4(r[0], r[1], r[2], r[3]);
  d[1] = make_uint4(r[4], r[5], r[6], r[7]);
}

dim3 warp_grid(int64_t out, int64_t rows) {
  DSV4_CHECK(rows <= 65535, "too many rows for one launch: ", rows);
  return dim3(static_cast<unsigned>((out + kWarps - 1) / kWarps), static_cast<unsigned>(rows));
}

}  // namespace

void quantize_q8_rows(const float* x, int64_t rows, int64_t in, uint8_t* codes, float* scales,
                      cudaStream_t s) {
  DSV4_CHECK(in % 128 == 0, "Q8 activation width ", in, " is not a multiple of 128");
  const int64_t total = rows * (in / 128);
  if (total == 0) return;
  prof::Launch pl("quantize_q8", double(rows) * in * 5 + double(total) * 4, s,
                  [&] { return "rows=" + std::to_string(rows) + " in=" + std::to_string(in); });
  launch_pdl(quantize_q8_kernel, (total + kWarps - 1) / kWarps, kWarps * 32, 0, s, x, in / 128, in, total, codes, scales);
}

void lin8(const uint8_t* xq, const float* xs, int64_t rows, int x_row_div, const uint8_t* w,
          const uint8_t* ws, int64_t out, int64_t in, const int32_t* ids, float* y, cudaStream_t s,
          bool round_out) {
  DSV4_CHECK(in % 128 == 0, "Lin8 input width ", in, " is not a multiple of 128");
  if (rows == 0) return;
  const double wrows8 = ids ? double(rows) : 1.0, xrows8 = double((rows + x_row_div - 1) / x_row_div);
  prof::Launch pl(ids ? "lin8 (experts)" : "lin8",
                  wrows8 * (double(out) * in + double((out + 127) / 128) * ((in + 127) / 128)) +
                      xrows8 * in * (1 + 4.0 / 128) + double(rows) * out * 4,
                  s, [&] { return "rows=" + std::to_string(rows) + " out=" + std::to_string(out) + " in=" + std::to_string(in); });
  if (ids == nullptr && mma::lin8(xq, xs, rows, x_row_div, w, ws, out, in, y, round_out, s)) return;
  launch_pdl(lin8_kernel, warp_grid(out, rows), kWarps * 32, 0, s, xq, xs, x_row_div, w, ws, out, in, ids, y, round_out);
}

void lin8_multi(const uint8_t* xq, const float* xs, int64_t rows, int64_t in, std::span<const Lin8Out> outs,
                cudaStream_t s) {
  DSV4_CHECK(in % 128 == 0, "Lin8 input width ", in, " is not a multiple of 128");
  if (rows == 0 || outs.empty()) return;
  DSV4_CHECK(outs.size() <= size_t(mma::kMaxDenseSegments), "lin8_multi: ", outs.size(), " outputs > ",
             mma::kMaxDenseSegments);
  mma::Lin8Segment segs[mma::kMaxDenseSegments];
  double bytes = double(rows) * in * (1 + 4.0 / 128);
  int64_t total = 0;
  for (size_t j = 0; j < outs.size(); ++j) {
    const Lin8Out& o = outs[j];
    bytes += double(o.out) * in + double((o.out + 127) / 128) * (in / 128) + double(rows) * o.out * 4;
    total += o.out;
    segs[j] = {.w = o.w, .ws = o.ws, .out = o.out, .y = o.y, .round_out = o.round_out};
  }
  {
    prof::Launch pl("lin8", bytes, s, [&] {
      return "rows=" + std::to_string(rows) + " out=" + std::to_string(total) + " in=" + std::to_string(in) + " (" +
             std::to_string(outs.size()) + " fused)";
    });
    if (mma::lin8_multi(xq, xs, rows, in, segs, int(outs.size()), s)) return;
  }
  for (const Lin8Out& o : outs) lin8(xq, xs, rows, 1, o.w, o.ws, o.out, in, nullptr, o.y, s, o.round_out);
}

void lin4(const uint8_t* xq, const float* xs, int64_t rows, int x_row_div, const uint8_t* w,
          const uint8_t* ws, int64_t out, int64_t in, const int32_t* ids, float* y, cudaStream_t s,
          bool round_out) {
  DSV4_CHECK(in % 128 == 0, "Lin4 input width ", in, " is not a multiple of 128");
  if (rows == 0) return;
  const double wrows4 = ids ? double(rows) : 1.0, xrows4 = double((rows + x_row_div - 1) / x_row_div);
  prof::Launch pl(ids ? "lin4 (experts)" : "lin4",
                  wrows4 * (double(out) * in / 2 + double(out) * in / 32) + xrows4 * in * (1 + 4.0 / 128) +
                      double(rows) * out * 4,
                  s, [&] { return "rows=" + std::to_string(rows) + " out=" + std::to_string(out) + " in=" + std::to_string(in); });
  launch_pdl(lin4_kernel, warp_grid(out, rows), kWarps * 32, 0, s, xq, xs, x_row_div, w, ws, out, in, ids, y, round_out);
}

void dense_linear(const float* x, int64_t rows, int64_t x_stride, const void* w, bool w_bf16,
                  int64_t out, int64_t in, int64_t out_per_group, bool round_bf16, float post_scale,
                  float* y, cudaStream_t s) {
  if (rows == 0) return;
  prof::Launch pl(w_bf16 ? "dense_linear (bf16)" : "dense_linear (fp32)",
                  double(out) * in * (w_bf16 ? 2 : 4) + double(rows) * x_stride * 4 + double(rows) * out * 4, s,
                  [&] { return "rows=" + std::to_string(rows) + " out=" + std::to_string(out) + " in=" + std::to_string(in); });
  const int64_t opg = out_per_group > 0 ? out_per_group : out;
  if (w_bf16 && mma::dense_bf16(x, rows, x_stride, static_cast<const uint16_t*>(w), out, in, opg, round_bf16,
                                post_scale, y, s))
    return;
  if (rows <= kSkinnyMaxRows && in % kLaneK == 0 && x_stride % 4 == 0 && out % opg == 0 && aligned16(x) &&
      aligned16(w)) {
    SkinnyArgs a{.x = x, .x_stride = x_stride, .w = w, .rows = rows, .out = out, .in = in, .opg = opg,
                 .tiles_per_group = 1, .rpc = 1, .round = round_bf16, .post_scale = post_scale, .y = y};
    if (w_bf16) launch_skinny<kBf16>(a, s);
    else launch_skinny<kF32>(a, s);
    return;
  }
  launch_pdl(dense_kernel, warp_grid(out, rows), kWarps * 32, 0, s, x, x_stride, w, w_bf16, out, in,
             out_per_group, round_bf16, post_scale, y);
}

void dense_linear_fp8(const float* x, int64_t rows, int64_t x_stride, const uint8_t* w, const uint8_t* ws,
                      int64_t out, int64_t in, int64_t out_per_group, bool round_bf16, float* y, cudaStream_t s,
                      uint16_t* wide, const uint16_t* x16, const int32_t* x16_exact) {
  if (rows == 0) return;
  if (rows > kDenseFp8MaxRows && wide != nullptr) {
    widen_fp8_tiles(w, ws, out, in, wide, s);
    return dense_linear(x, rows, x_stride, wide, true, out, in, out_per_group, round_bf16, 0.0f, y, s);
  }
  prof::Launch pl("dense_linear (fp8 as bf16)",
                  double(out) * in + double((out + 127) / 128) * (in / 128) + double(rows) * x_stride * (x16 ? 2 : 4) +
                      double(rows) * out * 4,
                  s, [&] { return "rows=" + std::to_string(rows) + " out=" + std::to_string(out) + " in=" + std::to_string(in); });
  const bool launched =
      mma::dense_fp8_as_bf16(x, rows, x_stride, w, ws, out, in, out_per_group, round_bf16, y, s, x16, x16_exact,
                             kBf16CopyFlagValues);
  DSV4_CHECK(launched, "dense_linear_fp8: weight [", out, ", ", in, "] in groups of ", out_per_group, " rows, x row stride ",
             x_stride, ": needs in % 128 == 0, groups of a multiple of 16 rows, x_stride % 4 == 0, 16-byte "
             "aligned x / w / x16, and x16 with its exactness flags or neither");
}

bool dense_linear_fp8_accepts(int64_t out, int64_t in, int64_t out_per_group, int64_t x_stride) {
  return mma::dense_fp8_as_bf16_accepts(out, in, out_per_group, x_stride);
}

void widen_fp8_tiles(const uint8_t* w, const uint8_t* ws, int64_t out, int64_t in, uint16_t* dst, cudaStream_t s) {
  DSV4_CHECK(in % 16 == 0 && aligned16(w) && aligned16(dst), "widen_fp8_tiles: [", out, ", ", in,
             "] needs in % 16 == 0 and 16-byte aligned buffers");
  const int64_t vecs = out * in / 16;
  if (vecs == 0) return;
  prof::Launch pl("widen_fp8_tiles", double(out) * in * 3 + double((out + 127) / 128) * (in / 128), s,
                  [&] { return "out=" + std::to_string(out) + " in=" + std::to_string(in); });
  launch_pdl(widen_fp8_tiles_kernel, unsigned((vecs + 255) / 256), 256, 0, s, w, ws, in, vecs, dst);
}

void dense_linear_multi(const float* x, int64_t rows, int64_t in, std::span<const DenseOut> outs, cudaStream_t s) {
  if (rows == 0 || outs.empty()) return;
  DSV4_CHECK(outs.size() <= size_t(mma::kMaxDenseSegments), "dense_linear_multi: ", outs.size(), " outputs > ",
             mma::kMaxDenseSegments);
  bool all_bf16 = true;
  double bytes = double(rows) * in * 4;
  mma::DenseSegment segs[mma::kMaxDenseSegments];
  for (size_t j = 0; j < outs.size(); ++j) {
    all_bf16 = all_bf16 && outs[j].w_bf16;
    bytes += double(outs[j].out) * in * (outs[j].w_bf16 ? 2 : 4) + double(rows) * outs[j].out * 4;
    segs[j] = {.w = static_cast<const uint16_t*>(outs[j].w), .out = outs[j].out, .y = outs[j].y,
               .round_bf16 = outs[j].round_bf16, .post_scale = outs[j].post_scale};
  }
  if (all_bf16) {
    prof::Launch pl("dense_linear (bf16)", bytes, s, [&] {
      int64_t total = 0;
      for (const DenseOut& o : outs) total += o.out;
      return "rows=" + std::to_string(rows) + " out=" + std::to_string(total) + " in=" + std::to_string(in) + " (" +
             std::to_string(outs.size()) + " fused)";
    });
    if (mma::dense_bf16_multi(x, rows, in, segs, int(outs.size()), s)) return;
  }
  for (const DenseOut& o : outs)
    dense_linear(x, rows, in, o.w, o.w_bf16, o.out, in, 0, o.round_bf16, o.post_scale, o.y, s);
}

void rms_norm_rows(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
                   cudaStream_t s) {
  if (rows == 0) return;
  prof::Launch pl("rms_norm", double(rows) * dim * 8 + double(dim) * 4, s,
                  [&] { return "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim); });
  const int per = rms_norm_vec_per_thread(dim, aligned16(x) && aligned16(w) && aligned16(y));  // float4s per thread
  if (per > 0) {
    const unsigned threads = rms_norm_vec_threads(dim);
    const unsigned grid = static_cast<unsigned>(rows);
    if (per == 1) launch_pdl(rms_norm_vec_kernel<1>, grid, threads, 0, s, x, w, dim, eps, y);
    else if (per == 2) launch_pdl(rms_norm_vec_kernel<2>, grid, threads, 0, s, x, w, dim, eps, y);
    else launch_pdl(rms_norm_vec_kernel<4>, grid, threads, 0, s, x, w, dim, eps, y);
  } else {
    launch_pdl(rms_norm_kernel, static_cast<unsigned>(rows), 256, 0, s, x, w, dim, eps, y);
  }
}

}  // namespace dsv4::gpu
