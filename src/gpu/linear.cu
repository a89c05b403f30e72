// Linear layers and RMSNorm of the CUDA backend (plain, correctness-first kernels).
//
// Design: one warp per (input row, output row). Lin8 walks the 128-wide K blocks in order;
// each lane multiplies 4 e4m3 pairs (exact in fp32), the warp sums them in double (exact:
// e4m3 products span < 2^36 and 128 of them fit in 53 bits, so the order does not matter),
// and every lane adds fp32(partial)·(s_x·s_w) to its accumulator in K order — bit-identical
// to cpu::Fp8Linear. Lin4 does four 32-wide blocks per iteration (8 lanes each) and adds them
// in order. Dense linears accumulate in double and round once (like the CPU, up to the last
// bit of a double). Shapes: x [rows, in], y [rows, out]; see ops.h.
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kWarps = 8;

__global__ void quantize_q8_kernel(const float* __restrict__ x, int64_t blocks_per_row, int64_t in,
                                   int64_t total_blocks, uint8_t* __restrict__ codes,
                                   float* __restrict__ scales) {
  const int64_t b = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (b >= total_blocks) return;
  const int lane = threadIdx.x & 31;
  const int64_t row = b / blocks_per_row, kb = b % blocks_per_row;
  const float* xb = x + row * in + kb * 128;
  float v[4], amax = 0.0f;
  for (int i = 0; i < 4; ++i) {
    v[i] = xb[lane * 4 + i];
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = warp_max(amax);
  const float sc = q8_block_scale(amax);
  uint8_t* cb = codes + row * in + kb * 128;
  for (int i = 0; i < 4; ++i) cb[lane * 4 + i] = float_to_e4m3(fminf(fmaxf(v[i] / sc, -448.0f), 448.0f));
  if (lane == 0) scales[b] = sc;
}

__global__ void lin8_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs,
                            int x_row_div, const uint8_t* __restrict__ w,
                            const uint8_t* __restrict__ ws, int64_t out, int64_t in,
                            const int32_t* __restrict__ ids, float* __restrict__ y, bool round_out) {
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
  quantize_q8_kernel<<<(total + kWarps - 1) / kWarps, kWarps * 32, 0, s>>>(x, in / 128, in, total, codes, scales);
  CUDA_CHECK_LAUNCH();
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
  lin8_kernel<<<warp_grid(out, rows), kWarps * 32, 0, s>>>(xq, xs, x_row_div, w, ws, out, in, ids, y, round_out);
  CUDA_CHECK_LAUNCH();
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
  lin4_kernel<<<warp_grid(out, rows), kWarps * 32, 0, s>>>(xq, xs, x_row_div, w, ws, out, in, ids, y, round_out);
  CUDA_CHECK_LAUNCH();
}

void dense_linear(const float* x, int64_t rows, int64_t x_stride, const void* w, bool w_bf16,
                  int64_t out, int64_t in, int64_t out_per_group, bool round_bf16, float post_scale,
                  float* y, cudaStream_t s) {
  if (rows == 0) return;
  prof::Launch pl(w_bf16 ? "dense_linear (bf16)" : "dense_linear (fp32)",
                  double(out) * in * (w_bf16 ? 2 : 4) + double(rows) * x_stride * 4 + double(rows) * out * 4, s,
                  [&] { return "rows=" + std::to_string(rows) + " out=" + std::to_string(out) + " in=" + std::to_string(in); });
  dense_kernel<<<warp_grid(out, rows), kWarps * 32, 0, s>>>(x, x_stride, w, w_bf16, out, in,
                                                           out_per_group, round_bf16, post_scale, y);
  CUDA_CHECK_LAUNCH();
}

void rms_norm_rows(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
                   cudaStream_t s) {
  if (rows == 0) return;
  prof::Launch pl("rms_norm", double(rows) * dim * 8 + double(dim) * 4, s,
                  [&] { return "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim); });
  rms_norm_kernel<<<static_cast<unsigned>(rows), 256, 0, s>>>(x, w, dim, eps, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
