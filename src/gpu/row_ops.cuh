// Device bodies of the row-wise kernels (RMSNorm, Q8 quantization, bf16 head RMS, Q8/Q4
// simulation, Walsh–Hadamard), shared by their one-operation kernels (linear.cu, pointwise.cu)
// and the fused chains of fused_rows.cu: both call the same code in the same order, so a fused
// chain gives the bits of the separate launches (all built with --fmad=false).
#pragma once

#include <cstdint>

#include "gpu/device_math.cuh"

namespace dsv4::gpu {

// Host side: which kernel the single-op launchers take (a fused chain must take the same one to
// give the same bits). rms_norm_rows: the register (vector) kernel with rms_norm_vec_per_thread
// float4s per thread (0: it declines, the strided kernel runs) and rms_norm_vec_threads threads.
inline int rms_norm_vec_per_thread(int64_t dim, bool aligned16) {
  const int64_t per = (dim / 4 + 255) / 256;
  return dim % 4 == 0 && per <= 4 && aligned16 ? static_cast<int>(per) : 0;
}
inline unsigned rms_norm_vec_threads(int64_t dim) {
  const int64_t warps32 = ((dim / 4 + 31) / 32) * 32;
  return static_cast<unsigned>(warps32 < 256 ? warps32 : 256);
}
// head_rms_bf16_rows: the warp-per-row kernel (len floats of shared memory per warp, ≤ 32 KB per
// block) or, when false, the one-thread-per-row kernel.
inline bool head_rms_warp_kernel_fits(int len) { return len % 4 == 0 && len <= 2048; }

// The RMSNorm weights thread t needs (float4s t, t + blockDim.x, ... of w; zeros past dim / 4).
// Weights are never written by earlier work on the stream, so kernels load them before pdl_wait.
template <int VPT>
__device__ __forceinline__ void rms_norm_weights(const float* __restrict__ w, int64_t dim, float4 (&wv)[VPT]) {
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * blockDim.x;
    wv[i] = j < dim / 4 ? __ldg(reinterpret_cast<const float4*>(w) + j) : make_float4(0, 0, 0, 0);
  }
}

// RMSNorm of one row of dim fp32 values (dim % 4 == 0, dim ≤ VPT·4·blockDim.x, blockDim.x a
// multiple of 32): thread t holds float4s t, t + blockDim.x, ... of the row in v (zeros past the
// end); the double sum of squares is add_squares per thread then block_sum (a fixed order); on
// return v holds bf16(w·(x·rs)) for the row's float4s (past the end: unchanged zeros). wv: the
// thread's weights (rms_norm_weights).
// Every thread of the block must call it (block barrier inside). red: 32 doubles of shared memory.
template <int VPT>
__device__ __forceinline__ void rms_norm_row_regs(const float* __restrict__ x_row, const float4 (&wv)[VPT],
                                                  int64_t dim, float eps, float4 (&v)[VPT], double* red) {
  const int64_t nvec = dim / 4;
  const float4* xr = reinterpret_cast<const float4*>(x_row);
  double ss = 0.0;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * blockDim.x;
    v[i] = j < nvec ? __ldg(xr + j) : make_float4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < VPT; ++i) ss = add_squares(ss, v[i]);
  ss = block_sum(ss, red);
  const float ms = float(ss / double(dim));
  const float rs = 1.0f / sqrtf(ms + eps);
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * blockDim.x;
    if (j < nvec)
      v[i] = make_float4(round_bf16(wv[i].x * (v[i].x * rs)), round_bf16(wv[i].y * (v[i].y * rs)),
                         round_bf16(wv[i].z * (v[i].z * rs)), round_bf16(wv[i].w * (v[i].w * rs)));
  }
}

// One 128-value Q8 block held by a warp, lane l owning values 4l..4l+3 (v): returns the block's
// power-of-two scale (from the warp's amax: fmaxf is exact and order-free) and the lane's four e4m3
// codes. All 32 lanes must call it. The one Q8 encoder of the activations (linears, mHC, the MoE).
__device__ __forceinline__ float q8_block_codes_warp(const float (&v)[4], uint8_t (&codes)[4]) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
  amax = warp_max(amax);
  const float sc = q8_block_scale(amax), inv = 1.0f / sc;  // a power of two: v·inv == v / sc exactly
#pragma unroll
  for (int i = 0; i < 4; ++i) codes[i] = float_to_e4m3(fminf(fmaxf(v[i] * inv, -448.0f), 448.0f));
  return sc;
}
// The same block stored row-major: codes[4l..4l+3], lane 0 writes the scale.
__device__ __forceinline__ void q8_quantize_block_warp(const float (&v)[4], int lane, uint8_t* __restrict__ codes,
                                                       float* __restrict__ scale) {
  uint8_t c[4];
  const float sc = q8_block_codes_warp(v, c);
#pragma unroll
  for (int i = 0; i < 4; ++i) codes[lane * 4 + i] = c[i];
  if (lane == 0) *scale = sc;
}

// cpu attention.cpp head_rms_bf16 on one row q of len values by one warp: the lanes form the
// bf16-rounded squares in parallel into sq (shared, len floats, 16-byte aligned), lane 0 adds
// them in row order (the reference's sequential fp32 sum), then every lane scales its share in
// place. Ends with the row written (call __syncwarp before other lanes read it).
__device__ __forceinline__ void head_rms_row_warp(float* q, int len, float eps, float* sq, int lane) {
  for (int i = lane; i < len; i += 32) sq[i] = round_bf16(q[i] * q[i]);
  __syncwarp();
  float rs = 0.0f;
  if (lane == 0) {
    float sum = 0.0f;
    const float4* s4 = reinterpret_cast<const float4*>(sq);
    int i = 0;
    for (; i + 4 <= len; i += 4) {
      const float4 v = s4[i / 4];
      sum += v.x;
      sum += v.y;
      sum += v.z;
      sum += v.w;
    }
    for (; i < len; ++i) sum += sq[i];
    const float mean = round_bf16(sum / float(len));
    rs = round_bf16(1.0f / sqrtf(round_bf16(mean + eps)));
  }
  rs = __shfl_sync(0xffffffffu, rs, 0);
  for (int i = lane; i < len; i += 32) q[i] = round_bf16(q[i] * rs);
}

// Q8 (block scale from amax/448, e4m3) or Q4 (amax/6, e2m1) simulation of one block of `block`
// values v by one warp, in place: lane i handles values i, i + 32, ...; the amax is a warp max.
template <bool Q4>
__device__ __forceinline__ void simulate_block_warp(float* v, int block, int lane) {
  float amax = 0.0f;
  for (int i = lane; i < block; i += 32) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (Q4) {
    const float sc = q4_block_scale(amax), inv = 1.0f / sc;  // powers of two: v·inv == v / sc exactly
    for (int i = lane; i < block; i += 32)
      v[i] = q4_sim_value(v[i], inv, sc);
  } else {
    const float sc = q8_block_scale(amax), inv = 1.0f / sc;
    for (int i = lane; i < block; i += 32)
      v[i] = round_bf16(e4m3_to_float(float_to_e4m3(fminf(fmaxf(v[i] * inv, -448.0f), 448.0f))) * sc);
  }
}

// Normalized Walsh–Hadamard of one row of len values (a power of two) by a block of exactly len
// threads, thread t owning value t: the fast transform in double (exact for bf16 inputs) in buf
// (len doubles of shared memory), then row[t] = bf16(buf[t]·len^−½). Block barriers inside.
__device__ __forceinline__ void hadamard_row_block(float* row, int len, double* buf) {
  const int t = threadIdx.x;
  buf[t] = row[t];
  __syncthreads();
  for (int h = 1; h < len; h *= 2) {
    double v = 0.0;
    const double a = buf[t], b = buf[t ^ h];
    v = (t & h) ? b - a : a + b;
    __syncthreads();
    buf[t] = v;
    __syncthreads();
  }
  const float scale = float(1.0 / sqrt(double(len)));
  row[t] = round_bf16(float(buf[t]) * scale);
}

}  // namespace dsv4::gpu
