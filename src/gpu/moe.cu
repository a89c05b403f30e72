// MoE routing, clamped SwiGLU and the expert combine (spec §4.8) on the GPU.
//
// Design: routing runs one thread per token (E ≤ 1024 experts, k ≤ 16): sqrt(softplus) in
// the CPU's fp32 steps, selection on biased scores by repeated first-argmax (= stable sort,
// ties → lower id) or tid2eid rows on hash layers, weights = score / Σ (selection order)
// × route_scale. The selected experts are then stored in ascending id so the combine adds
// them in the reference's order. Expert matmuls are lin4/lin8 with per-row expert ids.
// Shapes: logits [n, E]; ids/weights [n, k]; g/u/h [rows, inter]; routed [n·k, D].
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kMaxE = 1024;
constexpr int kMaxK = 16;

__global__ void route_kernel(const float* __restrict__ logits, const float* __restrict__ bias,
                             const int32_t* __restrict__ tid2eid, const int32_t* __restrict__ tokens,
                             int64_t n, int E, int k, float route_scale, int32_t* ids, float* weights,
                             int32_t* ids_sel) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const float* lg = logits + t * E;
  auto score = [&](int e) {
    const float v = lg[e];
    const float sp = v > 20.0f ? v : float(log1p(double(dexpf(v))));
    return sqrtf(sp);
  };
  int chosen[kMaxK];
  if (tid2eid != nullptr) {
    for (int j = 0; j < k; ++j) chosen[j] = tid2eid[int64_t(tokens[t]) * k + j];
  } else {
    uint32_t taken[kMaxE / 32] = {};
    for (int j = 0; j < k; ++j) {
      int best = -1;
      float bv = 0.0f;
      for (int e = 0; e < E; ++e) {
        if (taken[e >> 5] & (1u << (e & 31))) continue;
        const float b = score(e) + bias[e];
        if (best < 0 || b > bv) {
          best = e;
          bv = b;
        }
      }
      chosen[j] = best;
      taken[best >> 5] |= 1u << (best & 31);
    }
  }
  float w[kMaxK];
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    w[j] = score(chosen[j]);
    sum += w[j];
  }
  for (int j = 0; j < k; ++j) {
    w[j] /= sum;
    w[j] *= route_scale;
  }
  if (ids_sel != nullptr)
    for (int j = 0; j < k; ++j) ids_sel[t * k + j] = chosen[j];
  // Stable insertion sort by expert id (hash rows may repeat an id: keep their order).
  int order[kMaxK];
  for (int j = 0; j < k; ++j) {
    int pos = j;
    while (pos > 0 && chosen[order[pos - 1]] > chosen[j]) {
      order[pos] = order[pos - 1];
      --pos;
    }
    order[pos] = j;
  }
  for (int j = 0; j < k; ++j) {
    ids[t * k + j] = chosen[order[j]];
    weights[t * k + j] = w[order[j]];
  }
}

__global__ void swiglu_kernel(const float* g, const float* u, const float* weight, int64_t total,
                              int64_t inter, float limit, float* h) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  float gv = g[i], uv = u[i];
  if (limit > 0) {
    uv = fminf(fmaxf(uv, -limit), limit);
    gv = fminf(gv, limit);
  }
  float v = (gv / (1.0f + dexpf(-gv))) * uv;
  if (weight != nullptr) v = weight[i / inter] * v;
  h[i] = round_bf16(v);
}

__global__ void combine_kernel(const float* routed, const float* shared, int64_t n, int k, int64_t dim,
                               float* f) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * dim) return;
  const int64_t t = i / dim, c = i % dim;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) acc += routed[(t * k + j) * dim + c];
  f[i] = round_bf16(acc + shared[i]);
}

}  // namespace

void moe_route(const float* logits, const float* bias, const int32_t* tid2eid, const int32_t* tokens,
               int64_t n, int E, int k, float route_scale, int32_t* ids, float* weights,
               int32_t* ids_selection_order, cudaStream_t s) {
  DSV4_CHECK(E <= kMaxE && k <= kMaxK, "MoE with ", E, " experts, top-", k, " is not supported");
  if (n == 0) return;
  prof::Launch pl("moe_route", double(n) * E * 4 + double(E) * 4 + double(n) * k * 12, s);
  route_kernel<<<static_cast<unsigned>((n + 63) / 64), 64, 0, s>>>(logits, bias, tid2eid, tokens, n, E, k,
                                                                   route_scale, ids, weights, ids_selection_order);
  CUDA_CHECK_LAUNCH();
}

void swiglu(const float* g, const float* u, const float* weight, int64_t rows, int64_t inter, float limit,
            float* h, cudaStream_t s) {
  if (rows == 0) return;
  prof::Launch pl("swiglu", double(rows) * inter * 12, s);
  swiglu_kernel<<<static_cast<unsigned>((rows * inter + 255) / 256), 256, 0, s>>>(g, u, weight, rows * inter,
                                                                                 inter, limit, h);
  CUDA_CHECK_LAUNCH();
}

void moe_combine(const float* routed, const float* shared, int64_t n, int k, int64_t dim, float* f,
                 cudaStream_t s) {
  if (n == 0) return;
  prof::Launch pl("moe_combine", double(n) * k * dim * 4 + double(n) * dim * 8, s);
  combine_kernel<<<static_cast<unsigned>((n * dim + 255) / 256), 256, 0, s>>>(routed, shared, n, k, dim, f);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
