// MoE routing, clamped SwiGLU and the expert combine (spec §4.8) on the GPU.
//
// Design: routing runs one block per token (E ≤ 1024 experts, k ≤ 16): sqrt(softplus) in
// the CPU's fp32 steps, computed once per expert in parallel; selection on biased scores by
// repeated warp-wide first-argmax (= stable sort, ties → lower id) or tid2eid rows on hash layers, weights = score / Σ (selection order)
// × route_scale. The selected experts are then stored in ascending id so the combine adds
// them in the reference's order. Expert matmuls are lin4/lin8 with per-row expert ids.
// Shapes: logits [n, E]; ids/weights [n, k]; g/u/h [rows, inter]; routed [n·k, D].
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kMaxE = 1024;
constexpr int kMaxK = 16;

// One block per token: the E scores are computed once, in parallel, into shared memory; warp 0
// then selects the top-k by k warp-wide argmax passes (ties → lower expert id, as the CPU's
// stable sort) and lane 0 normalizes the weights and orders the experts by id.
__global__ void route_kernel(const float* __restrict__ logits, const float* __restrict__ bias,
                             const int32_t* __restrict__ tid2eid, const int32_t* __restrict__ tokens,
                             int64_t n, int E, int k, float route_scale, int32_t* ids, float* weights,
                             int32_t* ids_sel) {
  pdl_wait();
  pdl_trigger();
  __shared__ float s_score[kMaxE];
  __shared__ float s_biased[kMaxE];
  __shared__ unsigned char s_taken[kMaxE];
  __shared__ int s_chosen[kMaxK];
  const int64_t t = blockIdx.x;
  const float* lg = logits + t * E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const float v = lg[e];
    const float sp = v > 20.0f ? v : float(log1p(double(dexpf(v))));
    const float sc = sqrtf(sp);
    s_score[e] = sc;
    s_biased[e] = bias != nullptr ? sc + bias[e] : sc;
    s_taken[e] = 0;
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  if (tid2eid != nullptr) {
    if (lane < k) s_chosen[lane] = tid2eid[int64_t(tokens[t]) * k + lane];
  } else {
    for (int j = 0; j < k; ++j) {
      float bv = 0.0f;
      int best = -1;
      for (int e = lane; e < E; e += 32) {
        if (s_taken[e]) continue;
        const float b = s_biased[e];
        if (best < 0 || b > bv) {
          best = e;
          bv = b;
        }
      }
      for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_down_sync(0xffffffffu, bv, off);
        const int ob = __shfl_down_sync(0xffffffffu, best, off);
        if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) {
          bv = ov;
          best = ob;
        }
      }
      if (lane == 0) {
        s_chosen[j] = best;
        s_taken[best] = 1;
      }
      __syncwarp();
    }
  }
  __syncwarp();
  if (lane != 0) return;
  int chosen[kMaxK];
  for (int j = 0; j < k; ++j) chosen[j] = s_chosen[j];
  float w[kMaxK];
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    w[j] = s_score[chosen[j]];
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
  pdl_wait();
  pdl_trigger();
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
                               float* f, bool round_out) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * dim) return;
  const int64_t t = i / dim, c = i % dim;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) acc += routed[(t * k + j) * dim + c];
  f[i] = round_out ? round_bf16(acc + shared[i]) : acc + shared[i];
}

}  // namespace

void moe_route(const float* logits, const float* bias, const int32_t* tid2eid, const int32_t* tokens,
               int64_t n, int E, int k, float route_scale, int32_t* ids, float* weights,
               int32_t* ids_selection_order, cudaStream_t s) {
  DSV4_CHECK(E <= kMaxE && k <= kMaxK, "MoE with ", E, " experts, top-", k, " is not supported");
  if (n == 0) return;
  prof::Launch pl("moe_route", double(n) * E * 4 + double(E) * 4 + double(n) * k * 12, s);
  launch_pdl(route_kernel, static_cast<unsigned>(n), 256, 0, s, logits, bias, tid2eid, tokens, n, E, k, route_scale,
             ids, weights, ids_selection_order);
}

void swiglu(const float* g, const float* u, const float* weight, int64_t rows, int64_t inter, float limit,
            float* h, cudaStream_t s) {
  if (rows == 0) return;
  prof::Launch pl("swiglu", double(rows) * inter * 12, s);
  launch_pdl(swiglu_kernel, static_cast<unsigned>((rows * inter + 255) / 256), 256, 0, s, g, u, weight, rows * inter,
             inter, limit, h);
}

void moe_combine(const float* routed, const float* shared, int64_t n, int k, int64_t dim, float* f,
                 cudaStream_t s, bool round_out) {
  if (n == 0) return;
  prof::Launch pl("moe_combine", double(n) * k * dim * 4 + double(n) * dim * 8, s);
  launch_pdl(combine_kernel, static_cast<unsigned>((n * dim + 255) / 256), 256, 0, s, routed, shared, n, k, dim, f, round_out);
}

}  // namespace dsv4::gpu
