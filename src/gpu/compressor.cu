// KV compressor (spec §4.5) on the GPU: streaming state on the device.
//
// Design: channels are independent, so compressor_step runs one thread per output channel c
// (< h) that walks the call's tokens in order, owning state columns {c} (or {c, h+c} for the
// overlapping ratio-4 compressor). On each window boundary it pools its channel (softmax over
// the slots, fp32, the CPU's order) into the raw entry and shifts the overlap rows. Then
// compressor_finish post-processes each new entry with one block: bf16, RMSNorm, RoPE at
// position r·entry, then Q8 simulation (attention) or Hadamard + Q4 (indexer).
// Shapes: kv/score projections [n, width]; ape [r, width]; state [slots, width];
// entries [num_entries, h].
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

// Σ_s kv_s·softmax(score)_s over `count` slots (two segments: rows [0, r) column ca, rows
// [r, 2r) column cb for overlap; one segment for non-overlap).
__device__ float pool(const float* kv, const float* sc, int width, int r, bool overlap, int ca, int cb) {
  const int count = overlap ? 2 * r : r;
  auto at = [&](const float* base, int sidx) {
    return (overlap && sidx >= r) ? base[sidx * width + cb] : base[sidx * width + ca];
  };
  float m = -INFINITY;
  for (int i = 0; i < count; ++i) m = fmaxf(m, at(sc, i));
  float sum = 0.0f;
  for (int i = 0; i < count; ++i) sum += dexpf(at(sc, i) - m);
  float out = 0.0f;
  for (int i = 0; i < count; ++i) out += at(kv, i) * (dexpf(at(sc, i) - m) / sum);
  return out;
}

__global__ void step_kernel(const float* __restrict__ kv, const float* __restrict__ score,
                            const float* __restrict__ ape, int64_t n, int64_t start_pos, int r, int h,
                            bool overlap, float* st_kv, float* st_sc, float* entries) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= h) return;
  const int width = overlap ? 2 * h : h;
  const int ncols = overlap ? 2 : 1;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = start_pos + t;
    const int slot = int(pos % r);
    const int row = overlap ? r + slot : slot;
    for (int ci = 0; ci < ncols; ++ci) {
      const int col = c + ci * h;
      st_kv[row * width + col] = kv[t * width + col];
      st_sc[row * width + col] = score[t * width + col] + ape[slot * width + col];
    }
    if ((pos + 1) % r != 0) continue;
    const int64_t entry = pos / r;
    entries[entry * h + c] = pool(st_kv, st_sc, width, r, overlap, c, h + c);
    if (overlap) {
      for (int s = 0; s < r; ++s)
        for (int ci = 0; ci < 2; ++ci) {
          const int col = c + ci * h;
          st_kv[s * width + col] = st_kv[(r + s) * width + col];
          st_sc[s * width + col] = st_sc[(r + s) * width + col];
        }
    }
  }
}

// Block per entry, h threads (h ≤ 1024, a power of two for the indexer's Hadamard).
__global__ void finish_kernel(float* entries, int64_t first, int h, const float* __restrict__ norm,
                              float eps, int r, const float* __restrict__ table, int pairs, bool indexer) {
  __shared__ double red[32];
  extern __shared__ double buf[];
  const int64_t entry = first + blockIdx.x;
  float* e = entries + entry * h;
  const int k = threadIdx.x;
  const float v = round_bf16(e[k]);
  const double ss = block_sum(double(v) * double(v), red);
  const float ms = float(ss / double(h));
  const float rs = 1.0f / sqrtf(ms + eps);
  e[k] = round_bf16(norm[k] * (v * rs));
  __syncthreads();
  const int rope0 = h - 2 * pairs;
  if (k >= rope0 && ((k - rope0) & 1) == 0) {
    const int i = (k - rope0) / 2;
    const int64_t pos = entry * r;
    const float c = table[(pos * pairs + i) * 2], sn = table[(pos * pairs + i) * 2 + 1];
    const float a = e[k], b = e[k + 1];
    e[k] = round_bf16(a * c - b * sn);
    e[k + 1] = round_bf16(a * sn + b * c);
  }
  __syncthreads();
  if (!indexer) {
    // Q8 (block 64) on the no-rope dims: one thread per block.
    if (k < rope0 / 64) {
      float* blk = e + k * 64;
      float amax = 0.0f;
      for (int i = 0; i < 64; ++i) amax = fmaxf(amax, fabsf(blk[i]));
      const float sc = q8_block_scale(amax);
      for (int i = 0; i < 64; ++i)
        blk[i] = round_bf16(e4m3_to_float(float_to_e4m3(fminf(fmaxf(blk[i] / sc, -448.0f), 448.0f))) * sc);
    }
    return;
  }
  buf[k] = e[k];
  __syncthreads();
  for (int s = 1; s < h; s *= 2) {
    const double a = buf[k], b = buf[k ^ s];
    const double nv = (k & s) ? b - a : a + b;
    __syncthreads();
    buf[k] = nv;
    __syncthreads();
  }
  e[k] = round_bf16(float(buf[k]) * float(1.0 / sqrt(double(h))));
  __syncthreads();
  if (k < h / 32) {
    float* blk = e + k * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(blk[i]));
    const float sc = q4_block_scale(amax);
    for (int i = 0; i < 32; ++i)
      blk[i] = round_bf16(e2m1_to_float(float_to_e2m1(fminf(fmaxf(blk[i] / sc, -6.0f), 6.0f))) * sc);
  }
}

__global__ void reset_kernel(float* kv, float* sc, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  kv[i] = 0.0f;
  sc[i] = -INFINITY;
}

}  // namespace

void compressor_step(const float* kv, const float* score, const float* ape, int64_t n,
                     int64_t start_pos, int ratio, int h, bool overlap, float* state_kv,
                     float* state_score, float* entries, cudaStream_t s) {
  if (n == 0) return;
  const double width = double(overlap ? 2 : 1) * h, slots = double(overlap ? 2 : 1) * ratio;
  prof::Launch pl("compressor_step", double(n) * width * 8 + slots * width * 16 + double(n / ratio + 1) * h * 4, s,
                  [&] { return "n=" + std::to_string(n) + " ratio=" + std::to_string(ratio) + " h=" + std::to_string(h); });
  step_kernel<<<(h + 127) / 128, 128, 0, s>>>(kv, score, ape, n, start_pos, ratio, h, overlap, state_kv,
                                             state_score, entries);
  CUDA_CHECK_LAUNCH();
}

void compressor_finish(float* entries, int64_t first, int64_t count, int h, const float* norm,
                       float eps, int ratio, const float* rope_table, int pairs, bool indexer,
                       cudaStream_t s) {
  DSV4_CHECK(h % 64 == 0 && h <= 1024 && (!indexer || (h & (h - 1)) == 0), "compressor head dim ", h);
  if (count == 0) return;
  prof::Launch pl(indexer ? "compressor_finish (indexer)" : "compressor_finish", double(count) * h * 8, s);
  finish_kernel<<<static_cast<unsigned>(count), h, h * sizeof(double), s>>>(entries, first, h, norm, eps,
                                                                            ratio, rope_table, pairs, indexer);
  CUDA_CHECK_LAUNCH();
}

void compressor_reset(float* kv, float* score, int64_t count, cudaStream_t s) {
  if (count == 0) return;
  prof::Launch pl("compressor_reset", double(count) * 8, s);
  reset_kernel<<<static_cast<unsigned>((count + 255) / 256), 256, 0, s>>>(kv, score, count);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
