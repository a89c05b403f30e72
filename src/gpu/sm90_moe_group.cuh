// Grouped W4A8 MoE on sm_90a, the routing side (design: sm90_moe_fp4.cuh): phase 0 (Q8 of x into
// the MMA layout; routing → positions grouped by expert → chunks) and phase 3 (the per-token
// combine in ascending expert id), and the CTA-wide row Q8 with its stage records (x here, h in
// sm90_moe_wide.cuh). Device side, included by sm90_moe_fp4.cu.
#pragma once

#include <climits>
#include <cstdint>

#include "gpu/sm90_moe_fp4.cuh"

namespace dsv4::gpu::moe4 {

// The FP4 accumulator's factors at stage s of a row's 128-K scales sc (the wide kernels,
// sm90_moe_wide.cuh): {s_x(2s−1)/s_x(2s) (1 at s = 0), s_x(2s)/s_x(2s+1), s_x(2s+1)·2⁶, 0} — the
// rescales before 32-K blocks 0 and 4 of the stage and the last stage's scale, computed once per
// row and stage instead of by every thread whose columns include the row.
__device__ __forceinline__ void stage_record(const float* sc, int s, float* out) {
  const float r0 = s > 0 ? pow2_ratio(sc[2 * s - 1], sc[2 * s]) : 1.0f;
  *reinterpret_cast<float4*>(out) = make_float4(r0, pow2_ratio(sc[2 * s], sc[2 * s + 1]), sc[2 * s + 1] * 64.0f, 0.0f);
}

// Q8 of one row of K values by a whole CTA (a warp per 128-wide block, blocks strided by the
// CTA's warps; __ldcg: the row may come from the previous launch of a PDL chain): codes (MMA
// layout) and scales[K/128]; then, when records != nullptr (block-uniform), the row's K/256 stage
// records. Used for x (group launch) and h (moe_h_q8_kernel): the same codes as q8_block_store.
__device__ __forceinline__ void q8_row_cta(const float* row, int K, uint8_t* codes, float* scales, float* records) {
  const int lane = threadIdx.x & 31;
  for (int qb = threadIdx.x >> 5; qb < K / 128; qb += blockDim.x >> 5)
    q8_block_store(__ldcg(reinterpret_cast<const float4*>(row + qb * 128 + lane * 4)), lane, qb * 128, codes,
                   scales + qb);
  if (records == nullptr) return;
  __syncthreads();
  for (int s = threadIdx.x; s < K / 256; s += blockDim.x) stage_record(scales, s, records + s * 4);
}

// Phase 0. Blocks 0..T−1: quantize row b of x. Block T: routing → positions and chunks.
// blockDim = 1024.
__global__ void __launch_bounds__(1024) moe_group_kernel(const __grid_constant__ Params p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  pdl_wait();  // x, ids, weights come from earlier kernels; the gate+up grid may launch now
  pdl_trigger();
  if (blockIdx.x < unsigned(p.T)) {
    const int t = blockIdx.x;
    // The wide kernels (chunks of 64 or 128) also read x's stage records.
    q8_row_cta(p.x + size_t(t) * p.D, p.D, p.xq + size_t(t) * p.D, p.xs + size_t(t) * (p.D / 128),
               p.chunk_tokens > kTokWide ? p.xr + size_t(t) * (p.D / 64) : nullptr);
    return;
  }
  __shared__ int cnt[kMaxE + 1], fill[kMaxE + 1], off[kMaxE + 2], choff[kMaxE + 2];
  __shared__ int wsum[2][32];
  const int E = p.E, S = p.T * p.k, tid = threadIdx.x;
  if (tid <= E) {
    cnt[tid] = (tid == E && p.has_shared) ? p.T : 0;
    fill[tid] = 0;
  }
  __syncthreads();
  for (int s = tid; s < S; s += blockDim.x) atomicAdd(&cnt[min(max(p.ids[s], 0), E - 1)], 1);
  __syncthreads();
  // Block-wide exclusive scan of cnt and of the routed chunk counts (one entry per thread).
  // The shared expert's chunks (tid == E, each twice: its two halves of the rows) come first,
  // at indices 0..shared_chunks(T, chunk_tokens)−1 whatever the routing (the gate+up kernel starts their
  // weight copies before the grid dependency resolves), so they stay out of the chunk scan.
  const int ct = p.chunk_tokens;
  const int nsc = p.has_shared ? shared_chunks(p.T, ct) : 0;
  int c = tid <= E ? cnt[tid] : 0, nc = tid < E ? (c + ct - 1) / ct : 0;
  int ic = c, inc = nc;
  for (int o = 1; o < 32; o <<= 1) {
    const int a = __shfl_up_sync(0xffffffffu, ic, o), b = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) {
      ic += a;
      inc += b;
    }
  }
  if (lane == 31) {
    wsum[0][warp] = ic;
    wsum[1][warp] = inc;
  }
  __syncthreads();
  if (warp == 0) {
    int a = wsum[0][lane], b = wsum[1][lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int x = __shfl_up_sync(0xffffffffu, a, o), y = __shfl_up_sync(0xffffffffu, b, o);
      if (lane >= o) {
        a += x;
        b += y;
      }
    }
    wsum[0][lane] = a;
    wsum[1][lane] = b;
  }
  __syncthreads();
  const int base0 = warp ? wsum[0][warp - 1] : 0, base1 = warp ? wsum[1][warp - 1] : 0;
  if (tid <= E) {
    off[tid] = base0 + ic - c;
    choff[tid] = tid == E ? 0 : nsc + base1 + inc - nc;
    if (tid == E) *p.num_chunks = nsc + base1 + inc;
  }
  __syncthreads();
  for (int s = tid; s < S; s += blockDim.x) {
    const int e = min(max(p.ids[s], 0), E - 1);
    const int pos = off[e] + atomicAdd(&fill[e], 1);
    p.pos_token[pos] = s / p.k;
    p.pos_weight[pos] = p.weights[s];
    p.slot_pos[s] = pos;
  }
  if (p.has_shared)
    for (int t = tid; t < p.T; t += blockDim.x) {
      p.pos_token[off[E] + t] = t;
      p.pos_weight[off[E] + t] = 1.0f;
    }
  if (tid == E) nc = nsc;
  if (tid <= E)
    for (int j = 0; j < nc; ++j) {
      const int q = tid == E ? j >> 1 : j;  // shared: chunk q, half j & 1
      p.chunks[choff[tid] + j] =
          Chunk{tid + (tid == E ? j & 1 : 0), off[tid] + q * ct, min(ct, c - q * ct)};
    }
}

// Four columns c..c+3 of one token's combine: bf16(Σ_{j < k, in order} y[pos(j)] + y[shared_pos])
// (fp32; the shared term only with the shared expert). kL2: loads through L2 (rows another SM
// wrote during this launch), else plain loads.
template <bool kL2, class Pos>
__device__ __forceinline__ float4 combine_columns(const Params& p, const Pos& pos, int shared_pos, int c) {
  const auto load = [&](int row) {
    const float4* a = reinterpret_cast<const float4*>(p.y + size_t(row) * p.D + c);
    return kL2 ? __ldcg(a) : *a;
  };
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int j = 0; j < p.k; ++j) {
    const float4 v = load(pos(j));
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  const float4 sh = p.has_shared ? load(shared_pos) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  return make_float4(round_bf16(acc.x + sh.x), round_bf16(acc.y + sh.y), round_bf16(acc.z + sh.z),
                     round_bf16(acc.w + sh.w));
}

// Phase 3: out[t] = bf16(Σ_{ascending expert id} y[pos] + y[shared pos]); blockDim = 256,
// grid (T, ⌈D/1024⌉): each thread sums 4 columns (float4 loads, all k+1 independent), so a
// small batch still spreads over several SMs with one load latency per thread.
__global__ void __launch_bounds__(256) moe_combine_kernel(const __grid_constant__ Params p) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x, c = (blockIdx.y * 256 + threadIdx.x) * 4;
  if (c >= p.D) return;
  int order[kMaxTopK];
  for (int j = 0; j < p.k; ++j) {  // stable insertion sort by expert id
    int q = j;
    while (q > 0 && p.ids[t * p.k + order[q - 1]] > p.ids[t * p.k + j]) {
      order[q] = order[q - 1];
      --q;
    }
    order[q] = j;
  }
  *reinterpret_cast<float4*>(p.out + size_t(t) * p.D + c) =
      combine_columns<false>(p, [&](int j) { return p.slot_pos[t * p.k + order[j]]; }, p.T * p.k + t, c);
}

// One-token calls in one launch (moe_one_token_kernel, sm90_moe_one_token.cuh): the group
// kernel's lists for T = 1, k ≤ kTok, computed by every CTA from ids. Positions: the routed
// slots in ascending (clamped) expert id, ties in slot order — the order the combine sums in —
// then the shared expert at position k (= P); chunks: the shared expert's two halves (when
// present), then one per distinct routed expert, ascending (the group kernel's chunks for T = 1).
struct OneTokenPlan {
  int nch;        // chunks
  unsigned rows;  // y rows that complete a 128-row block: 128 × (distinct routed experts + shared)
  Chunk ch[2 + kTok];
  float pw[kTok];  // routing weight of routed position j
};

// Warp 0 of a CTA fills the plan: lane j < k loads slot j's id and weight once (through L2:
// the router wrote them), the rest is register and shuffle work.
__device__ __forceinline__ void one_token_plan(const Params& p, OneTokenPlan& pl) {
  const int i = threadIdx.x & 31, nsc = p.has_shared ? 2 : 0;
  const bool live = i < p.k;
  const int e = live ? min(max(__ldcg(p.ids + i), 0), p.E - 1) : INT_MAX;
  const float w = live ? __ldcg(p.weights + i) : 0.0f;
  int rank = 0, cnt = 0;  // position, slots of e
  bool first = live;      // the first slot of e
  for (int j = 0; j < p.k; ++j) {
    const int ej = __shfl_sync(0xffffffffu, e, j);
    rank += ej < e || (ej == e && j < i);
    cnt += ej == e;
    first = first && !(ej == e && j < i);
  }
  const unsigned firsts = __ballot_sync(0xffffffffu, first);
  int below = 0;  // distinct experts below e
  for (int j = 0; j < p.k; ++j) below += ((firsts >> j) & 1u) && __shfl_sync(0xffffffffu, e, j) < e;
  if (live) pl.pw[rank] = w;
  if (first) pl.ch[nsc + below] = Chunk{e, rank, cnt};
  if (i == 0) {
    const int nd = __popc(firsts);
    for (int h = 0; h < nsc; ++h) pl.ch[h] = Chunk{p.E + h, p.k, 1};
    pl.nch = nsc + nd;
    pl.rows = 128u * unsigned(nd + (p.has_shared ? 1 : 0));
  }
}

// Probe events (Params::probe): entry, plan read, x quantized, gate+up items done, h ready for
// the first down item (two launches: the down launch past its wait), down items done, exit (the
// later launch's); 7: the last block combined (its warpgroup's row); 8..12: a gate+up item's
// stages 0, 4, 8, 12 and its last stage ready (all 4 warps' copies in), 13: its epilogue done.
// 14: its epilogue's h stored, 15: its block counter added.
enum ProbeEvent : int { kPrEntry, kPrPlan, kPrXq, kPrUp, kPrReady, kPrDown, kPrExit, kPrCombined, kPrStage0 };
constexpr int kPrStages = 5;  // kPrStage0 .. kPrStage0 + 4, then kPrUpEpi
constexpr int kPrUpEpi = kPrStage0 + kPrStages, kPrUpEpi0 = kPrUpEpi + 1, kPrUpArrived = kPrUpEpi + 2;
__device__ __forceinline__ void probe_stamp(const Params& p, int wg, int ev, int wt) {
  if (p.probe == nullptr || wt != 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  p.probe[wg * kProbeEvents + ev] = t;
}

// Gate+up epilogue, after a 128-wide block of h's codes is stored (with moe_item's kQ8Down: after
// the warp's rows of h are stored): one more unit of chunk key `key` is ready (the shared
// expert's two halves share key 0); down items wait for one_token_h_count units.
__device__ __forceinline__ void one_token_h_ready(const Params& p, int key, int lane) {
  __syncwarp();
  if (lane == 0) red_add_release_gpu(&p.sync1[key], 1u);
}

// Down epilogue, after a warp stored its `rows` rows of y from row0 (all in one 128-row block):
// the warp that completes the block sums it as moe_combine_kernel does (out = bf16(Σ positions
// 0..k−1 in order + shared)); the one that combines the last block resets the readiness keys.
__device__ __forceinline__ void one_token_combine(const Params& p, const OneTokenPlan& pl, int row0, int rows,
                                                  int lane) {
  unsigned* cnt = p.sync1 + kOneTokenRows + row0 / 128;
  __syncwarp();
  unsigned old = 0;
  if (lane == 0) old = atom_add_acq_rel_gpu(cnt, unsigned(rows));
  old = __shfl_sync(0xffffffffu, old, 0);
  if (old + unsigned(rows) != pl.rows) return;
  __syncwarp();
  const int c = row0 / 128 * 128 + lane * 4;  // position j is routed slot j's (the plan's order)
  *reinterpret_cast<float4*>(p.out + c) = combine_columns<true>(p, [](int j) { return j; }, p.k, c);
  if (lane == 0) {
    *cnt = 0;
    unsigned* done = p.sync1 + kOneTokenRows + p.D / 128;
    __threadfence();
    if (atomicAdd(done, 1u) == unsigned(p.D / 128 - 1)) {  // every down item is past its wait
      for (int key = 0; key < pl.nch; ++key) p.sync1[key] = 0;
      *done = 0;
      probe_stamp(p, 0, kPrCombined, 0);  // the last block combined (warpgroup 0's row)
    }
  }
}

}  // namespace dsv4::gpu::moe4
