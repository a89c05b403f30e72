// Manifold-constrained hyper-connections (spec §4.3) on the GPU.
//
// Design: the fn projection runs as a dense fp32 linear (linear.cu); these kernels do the
// rest per token with one block (hc = 4 takes the register-resident fast path below, with
// the Sinkhorn split spread over one warp): the stream RMS (double sum over hc·D values), the
// tiny Sinkhorn split on one thread (n·(2+n) values, 20 iterations, the exact operation order of
// numerics/sinkhorn.cpp), and the weighted stream sums with the CPU's fp32 summation order.
// Shapes: streams [n, hc, D], mixes [n, M], post [n, hc], comb [n, hc, hc].
#include <cstdint>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/hc_post_device.cuh"
#include "gpu/linear_small_out.cuh"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"
#include "gpu/row_ops.cuh"

namespace dsv4::gpu {
namespace {

constexpr int kMaxHc = 8;

__device__ void sinkhorn_split(const float* mixes, const float* scale, const float* base, int n,
                               int iters, float eps, float* pre, float* post, float* comb) {
  for (int i = 0; i < n; ++i) {
    pre[i] = sigmoidf_ref(fmaf(mixes[i], scale[0], base[i])) + eps;
    post[i] = 2.0f * sigmoidf_ref(fmaf(mixes[n + i], scale[1], base[n + i]));
  }
  for (int i = 0; i < n; ++i) {
    float* row = comb + i * n;
    for (int j = 0; j < n; ++j) row[j] = fmaf(mixes[2 * n + n * i + j], scale[2], base[2 * n + n * i + j]);
    float m = row[0];
    for (int j = 1; j < n; ++j) m = fmaxf(m, row[j]);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {
      row[j] = dexpf(row[j] - m);
      sum += row[j];
    }
    for (int j = 0; j < n; ++j) row[j] = row[j] / sum + eps;
  }
  auto cols = [&] {
    for (int j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int i = 0; i < n; ++i) s += comb[i * n + j];
      for (int i = 0; i < n; ++i) comb[i * n + j] = comb[i * n + j] / (s + eps);
    }
  };
  auto rows = [&] {
    for (int i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int j = 0; j < n; ++j) s += comb[i * n + j];
      for (int j = 0; j < n; ++j) comb[i * n + j] = comb[i * n + j] / (s + eps);
    }
  };
  cols();
  for (int it = 0; it < iters - 1; ++it) {
    rows();
    cols();
  }
}

// Stream RMS factor r = 1/sqrt(mean(X²) + eps) over hc·D values.
__device__ float stream_rsqrt(const float* X, int64_t count, float eps, double* red) {
  double ss = 0.0;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) ss += double(X[k]) * double(X[k]);
  ss = block_sum(ss, red);
  const float ms = float(ss / double(count));
  return 1.0f / sqrtf(ms + eps);
}

__device__ void weighted_sum(const float* X, const float* pre, int hc, int64_t dim, float* x) {
  for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) {
    float s = pre[0] * X[k];
    for (int i = 1; i < hc; ++i) s += pre[i] * X[i * dim + k];
    x[k] = round_bf16(s);
  }
}

__global__ void hc_pre_kernel(const float* __restrict__ streams, const float* __restrict__ mixes_raw,
                              int64_t dim, const float* scale, const float* base, HcDeviceParams p,
                              float* x, float* post, float* comb) {
  pdl_wait();
  pdl_trigger();
  __shared__ double red[32];
  __shared__ float pre_s[kMaxHc];
  const int64_t t = blockIdx.x;
  const int hc = p.hc, M = hc * (2 + hc);
  const float* X = streams + t * hc * dim;
  const float rs = stream_rsqrt(X, hc * dim, p.norm_eps, red);
  if (threadIdx.x == 0) {
    float mixes[kMaxHc * (2 + kMaxHc)];
    for (int i = 0; i < M; ++i) mixes[i] = mixes_raw[t * M + i] * rs;
    float pr[kMaxHc], po[kMaxHc], cb[kMaxHc * kMaxHc];
    sinkhorn_split(mixes, scale, base, hc, p.iters, p.hc_eps, pr, po, cb);
    for (int i = 0; i < hc; ++i) {
      pre_s[i] = pr[i];
      post[t * hc + i] = po[i];
    }
    for (int i = 0; i < hc * hc; ++i) comb[t * hc * hc + i] = cb[i];
  }
  __syncthreads();
  weighted_sum(X, pre_s, hc, dim, x + t * dim);
}

__global__ void hc_head_kernel(const float* __restrict__ streams, const float* __restrict__ mixes_raw,
                               int64_t dim, const float* scale, const float* base, HcDeviceParams p,
                               float* y) {
  pdl_wait();
  pdl_trigger();
  __shared__ double red[32];
  __shared__ float pre_s[kMaxHc];
  const int64_t t = blockIdx.x;
  const int hc = p.hc;
  const float* X = streams + t * hc * dim;
  const float rs = stream_rsqrt(X, hc * dim, p.norm_eps, red);
  if (threadIdx.x < hc) {
    const float m = mixes_raw[t * hc + threadIdx.x] * rs;
    pre_s[threadIdx.x] = sigmoidf_ref(m * scale[0] + base[threadIdx.x]) + p.hc_eps;
  }
  __syncthreads();
  weighted_sum(X, pre_s, hc, dim, y + t * dim);
}

// ---- Fast path (hc = 4, D ≤ 8192, D % 4 == 0): one block per token -----------------------------
// 16 data warps: thread i holds float4 i, i+512, ... of every stream in registers: one read of
// the token's streams, the RMS as a fixed-order double block sum, and the weighted sum from
// registers. A 17th warp computes pre (needed by the weighted sum) and then the Sinkhorn split
// (post, comb: only hc_post needs them) while the data warps mix and normalize; the data warps
// sync among themselves on named barrier 1 from then on. The Sinkhorn split runs on that warp,
// lane i·4+j owning comb[i][j]: a row (column) pass only reads its row (column), so each lane
// redoes exactly the reference's sequential sum over it (shuffles in index order) and its own
// division — the same operations in the same order as the single-thread sinkhorn_split, so the
// results are bit-identical.
constexpr int kFastHc = 4, kFastData = 512, kFastThreads = kFastData + 32, kFastVpt = 4;
constexpr int64_t kFastTwoPassMinRows = 256;  // hc_pre_norm calls with more rows read the streams twice

// Block-wide double sum over the data warps only (named barrier 1; the Sinkhorn warp may be busy).
__device__ __forceinline__ double data_block_sum(double v, double* shared32) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  asm volatile("bar.sync 1, %0;" ::"n"(kFastData) : "memory");
  if (lane == 0) shared32[warp] = v;
  asm volatile("bar.sync 1, %0;" ::"n"(kFastData) : "memory");
  double t = 0.0;
  for (int i = 0; i < kFastData / 32; ++i) t += shared32[i];
  return t;
}

// post and comb of one token (pre: hc_pre_warp, computed first).
__device__ void sinkhorn_split_warp(const float* mixes_raw_t, float rs, const float* scale, const float* base,
                                    int iters, float eps, float* post_t, float* comb_t) {
  constexpr int n = kFastHc;
  const int lane = threadIdx.x & 31;
  const int L = lane & 15, i = L / n, j = L % n;
  const float mix = mixes_raw_t[2 * n + L] * rs;
  float c = fmaf(mix, scale[2], base[2 * n + L]);
  float m = c;
  for (int jj = 0; jj < n; ++jj) {
    const float v = __shfl_sync(0xffffffffu, c, i * n + jj);
    if (jj == 0) m = v;
    else m = fmaxf(m, v);
  }
  const float e = dexpf(c - m);
  float sum = 0.0f;
  for (int jj = 0; jj < n; ++jj) sum += __shfl_sync(0xffffffffu, e, i * n + jj);
  c = e / sum + eps;
  auto col_pass = [&] {
    float s = 0.0f;
    for (int ii = 0; ii < n; ++ii) s += __shfl_sync(0xffffffffu, c, ii * n + j);
    c = c / (s + eps);
  };
  auto row_pass = [&] {
    float s = 0.0f;
    for (int jj = 0; jj < n; ++jj) s += __shfl_sync(0xffffffffu, c, i * n + jj);
    c = c / (s + eps);
  };
  col_pass();
  for (int it = 0; it < iters - 1; ++it) {
    row_pass();
    col_pass();
  }
  if (lane < n * n) comb_t[lane] = c;
  if (lane < n) post_t[lane] = 2.0f * sigmoidf_ref(fmaf(mixes_raw_t[n + lane] * rs, scale[1], base[n + lane]));
}

// Optional fusions (nullptr = off): parts/chunks — the raw mixes arrive as small_out_linear
// partial sums [chunks, n, M] and are reduced here with the same warp order (same bits);
// norm_w — x is written as RMSNorm_w(mixed) (rms_norm_rows' formula, eps = p.norm_eps) instead of
// mixed itself; codes/scales (dim % 128 == 0) — also the Q8 of the written x (quantize_q8_rows'
// blocks: float4 k of a warp covers one 128-value block, lane l its values 4l..4l+3).
// kTwoPass (prefill-sized calls): the streams are read twice — once for the RMS, again (from L1 /
// L2) for the weighted sum — instead of being held in 64 registers, so two blocks fit an SM and
// one block's barriers and loads overlap the other's work. Same values, same order: same bits.
template <bool kHead, bool kTwoPass = false>
__global__ void __launch_bounds__(kFastThreads, kTwoPass ? 2 : 1) hc_fast_kernel(const float* __restrict__ streams,
                                                             const float* __restrict__ mixes_raw, int64_t dim,
                                                             const float* scale, const float* base, HcDeviceParams p,
                                                             float* x, float* post, float* comb,
                                                             const double* __restrict__ parts, int64_t chunks,
                                                             const float* __restrict__ norm_w, uint8_t* codes,
                                                             float* scales) {
  pdl_wait();
  pdl_trigger();
  __shared__ double red[32];
  __shared__ float pre_s[kFastHc];
  __shared__ float mix_s[kFastHc * (2 + kFastHc)];
  constexpr int hc = kFastHc, M = kHead ? hc : hc * (2 + hc);
  const int64_t t = blockIdx.x, nvec = dim / 4;
  const float* mixes_t = mixes_raw + t * M;
  if (parts != nullptr) {
    for (int o = threadIdx.x >> 5; o < M; o += kFastThreads / 32) {
      const double v = small_out_reduce_warp(parts, chunks, int64_t(gridDim.x) * M, t * M + o);
      if ((threadIdx.x & 31) == 0) mix_s[o] = float(v);
    }
    __syncthreads();
    mixes_t = mix_s;
  }
  const float4* X = reinterpret_cast<const float4*>(streams + t * hc * dim);
  const bool data = threadIdx.x < kFastData;  // warp-uniform; the last warp holds zeros
  auto load = [&](int s, int q) {
    const int64_t k = threadIdx.x + int64_t(q) * kFastData;
    return data && k < nvec ? __ldg(X + s * nvec + k) : make_float4(0, 0, 0, 0);
  };
  float4 v[kTwoPass ? 1 : hc][kTwoPass ? 1 : kFastVpt];
  double ss = 0.0;
  if constexpr (kTwoPass) {
#pragma unroll
    for (int s = 0; s < hc; ++s)
#pragma unroll
      for (int q = 0; q < kFastVpt; ++q) ss = add_squares(ss, load(s, q));
  } else {
#pragma unroll
    for (int s = 0; s < hc; ++s)
#pragma unroll
      for (int q = 0; q < kFastVpt; ++q) v[s][q] = load(s, q);
#pragma unroll
    for (int s = 0; s < hc; ++s)
#pragma unroll
      for (int q = 0; q < kFastVpt; ++q) ss = add_squares(ss, v[s][q]);
  }
  ss = block_sum(ss, red);
  const float rs = 1.0f / sqrtf(float(ss / double(hc * dim)) + p.norm_eps);
  if (threadIdx.x >= kFastData && threadIdx.x < kFastData + hc) {
    const int i = threadIdx.x - kFastData;
    pre_s[i] = kHead ? sigmoidf_ref(mixes_t[i] * rs * scale[0] + base[i]) + p.hc_eps
                     : sigmoidf_ref(fmaf(mixes_t[i] * rs, scale[0], base[i])) + p.hc_eps;
  }
  __syncthreads();
  if (!data) {  // the Sinkhorn warp: post and comb, concurrently with the data warps
    if (!kHead) sinkhorn_split_warp(mixes_t, rs, scale, base, p.iters, p.hc_eps, post + t * hc, comb + t * hc * hc);
    return;
  }
  const float p0 = pre_s[0], p1 = pre_s[1], p2 = pre_s[2], p3 = pre_s[3];
  float4* xo = reinterpret_cast<float4*>(x + t * dim);
  auto mix = [&](float a, float b, float c, float d) {
    float s = p0 * a;
    s += p1 * b;
    s += p2 * c;
    s += p3 * d;
    return round_bf16(s);
  };
  float4 m[kFastVpt];
#pragma unroll
  for (int q = 0; q < kFastVpt; ++q) {
    float4 a, b, c, d;
    if constexpr (kTwoPass) {
      a = load(0, q), b = load(1, q), c = load(2, q), d = load(3, q);
    } else {
      a = v[0][q], b = v[1][q], c = v[2][q], d = v[3][q];
    }
    m[q] = make_float4(mix(a.x, b.x, c.x, d.x), mix(a.y, b.y, c.y, d.y), mix(a.z, b.z, c.z, d.z),
                       mix(a.w, b.w, c.w, d.w));
  }
  float rn = 0.0f;
  if (norm_w != nullptr) {  // padding lanes hold mix(0, ...) = 0: they add nothing
    double sn = 0.0;
#pragma unroll
    for (int q = 0; q < kFastVpt; ++q) sn = add_squares(sn, m[q]);
    sn = data_block_sum(sn, red);
    rn = 1.0f / sqrtf(float(sn / double(dim)) + p.norm_eps);
  }
#pragma unroll
  for (int q = 0; q < kFastVpt; ++q) {
    const int64_t k = threadIdx.x + int64_t(q) * kFastData;
    if (k >= nvec) continue;  // warp-uniform when dim % 128 == 0 (the Q8 case)
    float4 o = m[q];
    if (norm_w != nullptr) {
      const float4 wv = __ldg(reinterpret_cast<const float4*>(norm_w) + k);
      o = make_float4(round_bf16(wv.x * (m[q].x * rn)), round_bf16(wv.y * (m[q].y * rn)),
                      round_bf16(wv.z * (m[q].z * rn)), round_bf16(wv.w * (m[q].w * rn)));
    }
    xo[k] = o;
    if (codes != nullptr) {
      const float ov[4] = {o.x, o.y, o.z, o.w};
      const int64_t blk = k / 32;  // 128-value block of float4 k
      q8_quantize_block_warp(ov, threadIdx.x & 31, codes + t * dim + blk * 128, scales + t * (dim / 128) + blk);
    }
  }
}

bool hc_fast_ok(int hc, int64_t dim, const void* streams, const void* out) {
  return hc == kFastHc && dim % 4 == 0 && dim <= int64_t(kFastData) * kFastVpt * 4 &&
         aligned16(streams) && aligned16(out);
}

__global__ void hc_post_kernel(const float* __restrict__ f, const float* __restrict__ post,
                               const float* __restrict__ comb, int64_t n, int64_t dim, int hc, bool round_f,
                               float* streams) {
  pdl_wait();
  pdl_trigger();
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * dim) return;
  const int64_t t = idx / dim, k = idx % dim;
  float* X = streams + t * hc * dim;
  const float* cb = comb + t * hc * hc;
  float in[kMaxHc], outv[kMaxHc];
  for (int i = 0; i < hc; ++i) in[i] = X[i * dim + k];
  const float fv = round_f ? round_bf16(f[t * dim + k]) : f[t * dim + k];
  for (int j = 0; j < hc; ++j) {
    float mix = cb[0 * hc + j] * in[0];
    for (int i = 1; i < hc; ++i) mix += cb[i * hc + j] * in[i];
    outv[j] = round_bf16(post[t * hc + j] * fv + mix);
  }
  for (int j = 0; j < hc; ++j) X[j * dim + k] = outv[j];
}

// hc = 4 (the models' hc_mult), dim % 4 == 0, 16-byte aligned rows: a thread per 4 consecutive
// k (float4 loads and stores) with its token's comb / post in registers — hc_post_kernel kept
// in[] / out[] in local memory and read comb per output. The same operations per element.
__global__ void hc_post4_kernel(const float* __restrict__ f, const float* __restrict__ post,
                                const float* __restrict__ comb, int64_t n, int64_t dim, bool round_f,
                                float* streams) {
  pdl_wait();
  pdl_trigger();
  const int64_t nv = dim / 4, idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * nv) return;
  const int64_t t = idx / nv, kv = idx % nv;
  hc_post4_apply(__ldg(reinterpret_cast<const float4*>(f + t * dim) + kv), post + t * 4, comb + t * 16,
                 reinterpret_cast<float4*>(streams + t * 4 * dim), nv, kv, round_f);
}

}  // namespace

void hc_pre_finish(const float* streams, const float* mixes_raw, int64_t n, int64_t dim,
                   const float* scale, const float* base, const HcDeviceParams& p, float* x,
                   float* post, float* comb, cudaStream_t s) {
  DSV4_CHECK(p.hc <= kMaxHc, "hc_mult ", p.hc, " > ", kMaxHc);
  if (n == 0) return;
  prof::Launch pl("hc_pre", double(n) * p.hc * dim * 4 + double(n) * dim * 4 + double(n) * p.hc * (3 + 2 * p.hc) * 4, s,
                  [&] { return std::string("n=") + std::to_string(n) + " " + "dim=" + std::to_string(dim); });
  if (hc_fast_ok(p.hc, dim, streams, x))
    launch_pdl(hc_fast_kernel<false>, static_cast<unsigned>(n), kFastThreads, 0, s, streams, mixes_raw, dim, scale,
               base, p, x, post, comb, nullptr, int64_t{0}, nullptr, nullptr, nullptr);
  else
    launch_pdl(hc_pre_kernel, static_cast<unsigned>(n), 256, 0, s, streams, mixes_raw, dim, scale, base, p, x, post, comb);
}

bool hc_pre_norm_applies(const HcDeviceParams& p, int64_t dim, const void* streams, const void* x,
                         const void* norm_w) {
  return hc_fast_ok(p.hc, dim, streams, x) && aligned16(norm_w);
}

bool hc_pre_norm(const float* streams, const double* parts, int64_t chunks, int64_t n, int64_t dim,
                 const float* scale, const float* base, const HcDeviceParams& p, const float* norm_w, float* x,
                 float* post, float* comb, cudaStream_t s, uint8_t* x_codes, float* x_scales) {
  DSV4_CHECK((x_codes == nullptr) == (x_scales == nullptr) && (x_codes == nullptr || dim % 128 == 0),
             "hc_pre_norm: Q8 output needs codes and scales and dim % 128 == 0 (dim ", dim, ")");
  if (n == 0) return true;
  if (!hc_pre_norm_applies(p, dim, streams, x, norm_w)) return false;
  const double q8_bytes = x_codes != nullptr ? double(n) * dim * (1.0 + 4.0 / 128) : 0.0;
  prof::Launch pl("hc_pre",
                  double(n) * p.hc * dim * 4 + double(n) * dim * 4 + double(chunks) * n * p.hc * (2 + p.hc) * 8 + q8_bytes,
                  s, [&] {
                    return std::string("n=") + std::to_string(n) + " dim=" + std::to_string(dim) + " +mix +norm" +
                           (x_codes != nullptr ? " +q8" : "");
                  });
  // Calls with more rows than a wave of one-block-per-SM launches (prefill) take the two-pass form.
  if (n > kFastTwoPassMinRows)
    launch_pdl(hc_fast_kernel<false, true>, static_cast<unsigned>(n), kFastThreads, 0, s, streams, nullptr, dim, scale,
               base, p, x, post, comb, parts, chunks, norm_w, x_codes, x_scales);
  else
    launch_pdl(hc_fast_kernel<false>, static_cast<unsigned>(n), kFastThreads, 0, s, streams, nullptr, dim, scale, base,
               p, x, post, comb, parts, chunks, norm_w, x_codes, x_scales);
  return true;
}

void hc_post(const float* f, const float* post, const float* comb, int64_t n, int64_t dim, int hc, bool round_f,
             float* streams, cudaStream_t s) {
  if (n == 0) return;
  prof::Launch pl("hc_post", double(n) * dim * 4 + double(n) * hc * dim * 8, s, [&] { return std::string("n=") + std::to_string(n) + " " + "dim=" + std::to_string(dim); });
  if (hc == 4 && dim % 4 == 0 && aligned16(f) && aligned16(post) && aligned16(comb) && aligned16(streams)) {
    launch_pdl(hc_post4_kernel, static_cast<unsigned>((n * dim / 4 + 255) / 256), 256, 0, s, f, post, comb, n, dim,
               round_f, streams);
    return;
  }
  launch_pdl(hc_post_kernel, static_cast<unsigned>((n * dim + 255) / 256), 256, 0, s, f, post, comb, n, dim, hc, round_f, streams);
}

void hc_head_finish(const float* streams, const float* mixes_raw, int64_t n, int64_t dim,
                    const float* scale, const float* base, const HcDeviceParams& p, float* y,
                    cudaStream_t s) {
  DSV4_CHECK(p.hc <= kMaxHc, "hc_mult ", p.hc, " > ", kMaxHc);
  if (n == 0) return;
  prof::Launch pl("hc_head", double(n) * p.hc * dim * 4 + double(n) * dim * 4, s, [&] { return std::string("n=") + std::to_string(n) + " " + "dim=" + std::to_string(dim); });
  if (hc_fast_ok(p.hc, dim, streams, y))
    launch_pdl(hc_fast_kernel<true>, static_cast<unsigned>(n), kFastThreads, 0, s, streams, mixes_raw, dim, scale,
               base, p, y, nullptr, nullptr, nullptr, int64_t{0}, nullptr, nullptr, nullptr);
  else
    launch_pdl(hc_head_kernel, static_cast<unsigned>(n), 256, 0, s, streams, mixes_raw, dim, scale, base, p, y);
}

}  // namespace dsv4::gpu
