// MoE router on the GPU (spec §4.8; contract: ops.h, moe_router): logits = x · gateᵀ, scores
// sqrt(softplus(logit)), top-k of score + bias (or the tid2eid row on hash layers), weights
// normalized × route_scale. Two kernels, the first reading the gate weights before it waits for
// its predecessor (programmatic dependent launch: they are parameters, never written by the step).
//
// Logit arithmetic (a function of D only — never of the row count or tiling, so batched decode
// equals per-sequence calls bit for bit): every product x·w is exact in double (fp32 × bf16 or
// fp32 × fp32). K is cut into 512-wide chunks c and each chunk into 32 slots: slot l owns the 16
// positions k = 512c + 128j + 4l + i (j, i = 0..3) and adds their products in that (j, i) order
// as a double FMA chain from 0; the chunk value is the slot values added in slot order
// (((v0 + v1) + v2) + … + v31); the logit is float(Σ_c chunk_c), the chunks added in increasing c
// from the first. The CPU reference (cpu::Fp32Linear) adds the same exact products sequentially
// in double, so the two fp32 logits differ only when the exact sum lies within a double's last
// bits of an fp32 rounding boundary (~2^-29 relative) — in practice they are equal, and so are
// the routings.
//
// Kernel 1 (partials): grid (chunks, ceil(E / 32), ceil(n / 8)); a CTA stages its ≤ 8 x rows of
// the chunk in shared memory (float4 per lane: conflict-free), warp w owns experts e0 + 4w .. +3,
// lane l runs slot l; after kTailRows rows, lane 4·rr + ei adds the 32 slot values of row rr's
// expert ei in order.
// From kWideMinRows rows (prefill), moe_router_wide.cuh's kernel computes whole logits with FP64
// tensor-core MMAs in the same arithmetic and writes them as one chunk.
// Kernel 2 (route): one CTA per row; a thread per expert adds its chunk partials (loads issued
// together) into the scores; warp 0 holds experts l, l + 32, … per lane in registers and selects
// by k warp-wide argmax passes (ties → lower expert id, as the CPU's stable sort); lane j keeps
// the j-th choice; weights normalized in selection order; experts written in ascending id.
#include <cstdint>
#include <mutex>

#include "base/check.h"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/ops.h"
#include "gpu/pdl.cuh"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int kChunk = 512, kRows = 8, kWarps = 8, kThreads = kWarps * 32, kExpertsPerWarp = 4;
constexpr int kExpertsPerCta = kWarps * kExpertsPerWarp;
constexpr int kMaxE = 1024, kMaxK = 16;  // kMaxK ≤ 32: one lane per choice
// Rows whose slot values a warp parks before adding them: lane 4·rr + ei adds row rr's expert
// ei, so the slot-order sums (31 dependent double adds) of kTailRows rows run side by side.
constexpr int kTailRows = 4;

// The 4 gate values of expert row `wrow` at k .. k + 3 (zero when !valid), as doubles (exact).
template <bool kBf16>
__device__ __forceinline__ void gate_quad(const void* wrow, int64_t k, bool valid, double* out) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (valid && kBf16) {
    v = bf16x4_to_float4(__ldg(reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(wrow) + k)));
  } else if (valid) {
    v = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(wrow) + k));
  }
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}

// Rows per CTA: kRows × groups (calls of many rows loop over row groups, so a CTA's weights —
// converted to double once — serve up to 64 rows).
inline int row_groups(int64_t n) { return n > 64 ? 8 : 1; }

template <bool kBf16>
__global__ void __launch_bounds__(kThreads) router_partials_kernel(const float* __restrict__ x, int64_t n, int64_t D,
                                                                   const void* __restrict__ gate, int E, int groups,
                                                                   double* __restrict__ partials) {
  __shared__ float4 xs[kRows][kChunk / 4];
  // Slot l of (row rr, expert ei) = sum i = kExpertsPerWarp·rr + ei at [i][(l + i) % 32]: the
  // adding lanes read 16 different banks pairs, the writing lanes consecutive doubles.
  __shared__ double slot_vals[kWarps][kTailRows * kExpertsPerWarp][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c = blockIdx.x, k0 = c * kChunk;
  const int e0 = blockIdx.y * kExpertsPerCta + warp * kExpertsPerWarp;
  // Weights first (parameters: safe before pdl_wait), as doubles: products below need no
  // conversion of w (a 64-bit conversion issues at a quarter of the DFMA rate).
  double w[kExpertsPerWarp][16];
#pragma unroll
  for (int ei = 0; ei < kExpertsPerWarp; ++ei) {
    const int e = min(e0 + ei, E - 1);  // experts past E read a valid row and are never stored
    const void* wrow = kBf16 ? static_cast<const void*>(static_cast<const uint16_t*>(gate) + int64_t(e) * D)
                             : static_cast<const void*>(static_cast<const float*>(gate) + int64_t(e) * D);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t k = k0 + 128 * j + 4 * lane;
      gate_quad<kBf16>(wrow, k, k < D, &w[ei][4 * j]);
    }
  }
  pdl_wait();
  pdl_trigger();
#pragma unroll 1
  for (int gi = 0; gi < groups; ++gi) {
    const int64_t r0 = (int64_t(blockIdx.z) * groups + gi) * kRows;
    if (r0 >= n) break;  // CTA-uniform
    const int rg = int(min(int64_t{kRows}, n - r0));
    constexpr int kPerThread = kRows * kChunk / 4 / kThreads;  // float4 of x per thread, loaded together
    float4 xv[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads, r = i / (kChunk / 4);
      const int64_t k = k0 + 4 * (i % (kChunk / 4));
      xv[j] = r < rg && k < D ? __ldg(reinterpret_cast<const float4*>(x + (r0 + r) * D + k))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (gi > 0) __syncthreads();  // the previous group's rows are read
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      xs[i / (kChunk / 4)][i % (kChunk / 4)] = xv[j];
    }
    __syncthreads();
#pragma unroll 1
    for (int rb = 0; rb < rg; rb += kTailRows) {
      const int nr = min(kTailRows, rg - rb);
#pragma unroll 1
      for (int rr = 0; rr < nr; ++rr) {
        double acc[kExpertsPerWarp];
#pragma unroll
        for (int ei = 0; ei < kExpertsPerWarp; ++ei) acc[ei] = 0.0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float4 xq = xs[rb + rr][32 * j + lane];
          const double xd[4] = {xq.x, xq.y, xq.z, xq.w};
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int ei = 0; ei < kExpertsPerWarp; ++ei) acc[ei] = __fma_rn(xd[i], w[ei][4 * j + i], acc[ei]);
        }
#pragma unroll
        for (int ei = 0; ei < kExpertsPerWarp; ++ei) {
          const int i = kExpertsPerWarp * rr + ei;
          slot_vals[warp][i][(lane + i) & 31] = acc[ei];
        }
      }
      __syncwarp();
      const int rr = lane / kExpertsPerWarp, ei = lane % kExpertsPerWarp;
      if (rr < nr && e0 + ei < E) {
        const double* sv = slot_vals[warp][lane];
        double v = sv[lane & 31];
#pragma unroll
        for (int l = 1; l < 32; ++l) v += sv[(l + lane) & 31];
        partials[(c * n + r0 + rb + rr) * E + e0 + ei] = v;
      }
      __syncwarp();  // the next rows' slot values overwrite these
    }
  }
}

// Warp-wide argmax of (v, e) over lanes, ties → lower e; e < 0: no candidate. Every lane returns
// the same pair (xor butterfly of a total order). `sc` travels with the winner.
__device__ __forceinline__ void warp_argmax(float& v, int& e, float& sc) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oe = __shfl_xor_sync(0xffffffffu, e, off);
    const float os = __shfl_xor_sync(0xffffffffu, sc, off);
    if (oe >= 0 && (e < 0 || ov > v || (ov == v && oe < e))) {
      v = ov;
      e = oe;
      sc = os;
    }
  }
}

constexpr int kChunkLoads = 16;  // chunk partials a thread loads before adding them

// One CTA per row: the E logits (chunk partials added in increasing c) and scores in shared
// memory, then warp 0 selects. Lane j (< k) ends holding the j-th selected expert and its score;
// the normalization and the ascending-id order are formed by shuffles (no per-lane arrays).
template <int kPer>  // experts per lane in the selection (E ≤ 32·kPer)
__global__ void __launch_bounds__(kThreads) router_route_kernel(const double* __restrict__ partials, int64_t chunks,
                                                                int64_t n, int E, int k, const float* __restrict__ bias,
                                                                const int32_t* __restrict__ tid2eid,
                                                                const int32_t* __restrict__ tokens, float route_scale,
                                                                int32_t* ids, float* weights, int32_t* ids_sel) {
  __shared__ float s_score[kMaxE], s_biased[kMaxE];
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  for (int e = threadIdx.x; e < E; e += kThreads) {
    double s = 0.0;
    for (int64_t c0 = 0; c0 < chunks; c0 += kChunkLoads) {
      double p[kChunkLoads];
#pragma unroll
      for (int c = 0; c < kChunkLoads; ++c) p[c] = c0 + c < chunks ? partials[((c0 + c) * n + t) * E + e] : 0.0;
#pragma unroll
      for (int c = 0; c < kChunkLoads; ++c) {
        if (c0 + c >= chunks) break;
        s = c0 + c == 0 ? p[c] : s + p[c];
      }
    }
    const float v = float(s);
    const float sp = v > 20.0f ? v : float(log1p(double(dexpf(v))));
    const float sc = sqrtf(sp);
    s_score[e] = sc;
    s_biased[e] = bias != nullptr ? sc + bias[e] : sc;
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  int my_e = -1;      // lane j < k: the j-th selected expert
  float my_w = 0.0f;  // and its score
  if (tid2eid != nullptr) {
    if (lane < k) {
      my_e = tid2eid[int64_t(tokens[t]) * k + lane];
      my_w = s_score[my_e];
    }
  } else {
    float score[kPer], biased[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      score[i] = e < E ? s_score[e] : 0.0f;
      biased[i] = e < E ? s_biased[e] : 0.0f;
    }
    uint32_t taken = 0;  // bit i: expert lane + 32i already chosen
    for (int j = 0; j < k; ++j) {
      float bv = 0.0f, bs = 0.0f;
      int be = -1;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {  // ascending e within the lane: '>' keeps the lower id on ties
        const int e = lane + 32 * i;
        if (e >= E || (taken >> i) & 1u) continue;
        if (be < 0 || biased[i] > bv) {
          bv = biased[i];
          be = e;
          bs = score[i];
        }
      }
      warp_argmax(bv, be, bs);
      if ((be & 31) == lane) taken |= 1u << (be >> 5);
      if (lane == j) {
        my_e = be;
        my_w = bs;
      }
    }
  }
  // Σ of the scores in selection order (every lane the same), then each lane its own weight.
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum += __shfl_sync(0xffffffffu, my_w, j);
  float w = my_w / sum;
  w *= route_scale;
  // Stable ascending-id rank of lane j's expert among the k (hash rows may repeat an id).
  int rank = 0;
  for (int j = 0; j < k; ++j) {
    const int e = __shfl_sync(0xffffffffu, my_e, j);
    rank += lane < k && (e < my_e || (e == my_e && j < lane));
  }
  if (lane < k) {
    if (ids_sel != nullptr) ids_sel[t * k + lane] = my_e;
    ids[t * k + rank] = my_e;
    weights[t * k + rank] = w;
  }
}

#include "gpu/moe_router_wide.cuh"

// Whether the wide kernel takes the call: many rows, whole 512-chunks, 64-expert blocks, aligned.
bool wide_router_applies(const float* x, int64_t n, int64_t D, const void* gate, int E) {
  return n >= kWideMinRows && D % kChunk == 0 && E % kWideExperts == 0 && aligned16(x) && aligned16(gate);
}

// Whether the wide kernel should split the call by chunk (too few CTAs for one wave otherwise).
bool wide_router_per_chunk(int64_t n, int E) {
  return int64_t{E / kWideExperts} * ((n + kWideRows - 1) / kWideRows) < device_sm_count();
}

template <bool kBf16>
void launch_router_wide(const float* x, int64_t n, int64_t D, const void* gate, int E, bool per_chunk,
                        double* partials, cudaStream_t s) {
  static std::once_flag attr_set[kMaxDevices];  // cudaFuncSetAttribute is per device (TP ranks)
  call_once_per_device(attr_set, [] {
    CUDA_CHECK(cudaFuncSetAttribute(router_logits_wide_kernel<kBf16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kWideSmem)));
  });
  const dim3 grid{unsigned(E / kWideExperts), unsigned((n + kWideRows - 1) / kWideRows),
                  unsigned(per_chunk ? D / kChunk : 1)};
  launch_pdl(router_logits_wide_kernel<kBf16>, grid, kWideThreads, kWideSmem, s, x, n, D, gate, E, per_chunk,
             partials);
}

}  // namespace

int64_t moe_router_workspace(int64_t n, int64_t D, int64_t E) { return (D + kChunk - 1) / kChunk * n * E; }

void moe_router(const float* x, int64_t n, int64_t D, const void* gate, bool gate_bf16, const float* bias,
                const int32_t* tid2eid, const int32_t* tokens, int E, int k, float route_scale, double* partials,
                int64_t partials_size, int32_t* ids, float* weights, int32_t* ids_selection_order, cudaStream_t s) {
  DSV4_CHECK(E >= 1 && E <= kMaxE && k >= 1 && k <= kMaxK && k <= E, "MoE router: ", E, " experts, top-", k,
             " (supported: E <= ", kMaxE, ", k <= ", kMaxK, ")");
  DSV4_CHECK(D % 16 == 0, "MoE router: hidden size ", D, " is not a multiple of 16");
  DSV4_CHECK(partials_size >= moe_router_workspace(n, D, E), "MoE router: workspace of ", partials_size,
             " doubles, needs ", moe_router_workspace(n, D, E));
  if (n == 0) return;
  const bool wide = wide_router_applies(x, n, D, gate, E);
  const bool per_chunk = wide && wide_router_per_chunk(n, E);
  // The wide kernel writes whole logits (one "chunk") unless it splits the call by chunk.
  const int64_t chunks = wide && !per_chunk ? 1 : (D + kChunk - 1) / kChunk;
  if (wide) {
    const double wbytes = double(E) * double(D) * (gate_bf16 ? 2.0 : 4.0);
    prof::Launch pl("moe_router (logits)", wbytes + double(n) * D * 4 + double(chunks) * n * E * 8, s);
    if (gate_bf16) launch_router_wide<true>(x, n, D, gate, E, per_chunk, partials, s);
    else launch_router_wide<false>(x, n, D, gate, E, per_chunk, partials, s);
  } else {
    const double wbytes = double(E) * double(D) * (gate_bf16 ? 2.0 : 4.0);
    prof::Launch pl("moe_router (logits)", wbytes + double(n) * D * 4 + double(chunks) * n * E * 8, s);
    const int groups = row_groups(n);
    const int64_t rows_per_cta = int64_t{kRows} * groups;
    const dim3 grid(unsigned(chunks), unsigned((E + kExpertsPerCta - 1) / kExpertsPerCta),
                    unsigned((n + rows_per_cta - 1) / rows_per_cta));
    if (gate_bf16) launch_pdl(router_partials_kernel<true>, grid, kThreads, 0, s, x, n, D, gate, E, groups, partials);
    else launch_pdl(router_partials_kernel<false>, grid, kThreads, 0, s, x, n, D, gate, E, groups, partials);
  }
  prof::Launch pl("moe_router (route)", double(chunks) * n * E * 8 + double(E) * 4 + double(n) * k * 12, s);
  const unsigned grid = unsigned(n);
  if (E <= 256) {
    launch_pdl(router_route_kernel<8>, grid, kThreads, 0, s, partials, chunks, n, E, k, bias, tid2eid, tokens,
               route_scale, ids, weights, ids_selection_order);
  } else {
    launch_pdl(router_route_kernel<32>, grid, kThreads, 0, s, partials, chunks, n, E, k, bias, tid2eid, tokens,
               route_scale, ids, weights, ids_selection_order);
  }
}

}  // namespace dsv4::gpu
