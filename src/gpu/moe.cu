// MoE clamped SwiGLU and the expert combine (spec §4.8) on the GPU (the reference path; the
// grouped FP4 kernels are moe_grouped.h).
//
// Design: routing is moe_router.cu; the experts' matmuls are lin4/lin8 with per-row expert ids
// (ids in ascending order, so the combine adds the experts in the reference's order).
// Shapes: ids/weights [n, k]; g/u/h [rows, inter]; routed [n·k, D].
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

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
