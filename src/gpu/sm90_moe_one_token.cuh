// The grouped MoE of a one-token call (T = 1, k ≤ kTok) in one launch (pipeline variant 18;
// docs/moe-grouped.md round 20) or two (19: gate+up, then down): the group, gate+up, down and
// combine launches of the decode-sized path folded into one persistent grid with the 8 × 4 gemm
// kernel's items, rings and math (moe_item<kT1>), so the same bits. sm_90a only; included by
// sm90_moe_fp4.cu.
//   * No group launch: every CTA computes the lists from ids (one_token_plan) and quantizes x
//     into its own row blockIdx.x of xq / xs (the same q8_block_store).
//   * Items: all gate+up items (chunk, 4 row tiles), then all down items, dealt round-robin to
//     the grid's warpgroups, so a warpgroup's down items come after its gate+up items and gate+up
//     items never wait (no deadlock while every CTA of the grid can become resident: not to be
//     run beside a kernel that holds SMs while it waits for this one).
//   * h per expert, not per grid: the gate+up item that quantizes a 128-wide block of h counts it
//     for its chunk (one_token_h_ready); a down item first issues its weights' first stages,
//     then waits only for its own expert's I/128 blocks.
//   * The combine in the down tail: the warp that completes a 128-row block of y sums it
//     (one_token_combine), and the last such warp resets the counters for the next call.
#pragma once

#include <cstdint>

#include "gpu/sm90_moe_gemm.cuh"
#include "gpu/sm90_moe_group.cuh"

namespace dsv4::gpu::moe4 {

// The count on h's chunk key when the chunk's h is complete: 128-wide blocks quantized by the
// gate+up epilogues, or with kQ8Down (moe_item) the gate+up warps' row tiles (16 rows a routed
// warp, 8 a shared one).
__device__ __forceinline__ unsigned one_token_h_count(const Params& p, bool fp8, bool q8_down) {
  return unsigned(q8_down ? p.I / (fp8 ? 8 : 16) : p.I / 128);
}

// Spins (thread 0 of the warpgroup, then its barrier) until h's chunk key holds `blocks` blocks.
__device__ __forceinline__ void wait_h_ready(const unsigned* key, unsigned blocks, int wt, int bar) {
  if (wt == 0) {
    while (ld_acquire_gpu(key) < blocks) __nanosleep(64);
  }
  group_sync(bar);
}

// x's Q8 for a one-token launch in two halves, so that the lists and the first weights can be
// issued between them: one_token_x_load loads a warp's first kOneTokenXr 128-wide blocks of x
// (blocks warp + i·kNw; with 8 warps all of D = 4096) into registers; one_token_x_store
// quantizes them, and any blocks past them, into this CTA's row blockIdx.x of xq / xs, where
// moe_item<kT1> reads its activations. Every warp of the CTA calls both.
constexpr int kOneTokenXr = 4;
struct OneTokenX {
  float4 v[kOneTokenXr];
};
template <int kNw>
__device__ __forceinline__ void one_token_x_load(const Params& p, int warp, int lane, OneTokenX& x) {
  const int nqb = p.D / 128;
#pragma unroll
  for (int i = 0; i < kOneTokenXr; ++i)
    if (warp + i * kNw < nqb) x.v[i] = __ldcg(reinterpret_cast<const float4*>(p.x + (warp + i * kNw) * 128 + lane * 4));
}
template <int kNw>
__device__ __forceinline__ void one_token_x_store(const Params& p, int warp, int lane, const OneTokenX& x) {
  const int nqb = p.D / 128;
  uint8_t* xq_row = p.xq + size_t(blockIdx.x) * p.D;
  float* xs_row = p.xs + size_t(blockIdx.x) * nqb;
#pragma unroll
  for (int i = 0; i < kOneTokenXr; ++i)
    if (warp + i * kNw < nqb)
      q8_block_store(x.v[i], lane, (warp + i * kNw) * 128, xq_row, xs_row + warp + i * kNw);
  for (int qb = warp + kOneTokenXr * kNw; qb < nqb; qb += kNw)  // D > kOneTokenXr · kNw · 128
    q8_block_store(__ldcg(reinterpret_cast<const float4*>(p.x + qb * 128 + lane * 4)), lane, qb * 128, xq_row,
                   xs_row + qb);
}

// The one-token prologue's two CTA-wide halves around the first weight prefetches (every thread
// calls both): the grid dependency, x's loads (first: on this SM they would otherwise queue
// behind ~100 KB of weight copies — the probe measured 6 µs to x's codes with the loads issued
// after them) and the lists (warp 0), then x's Q8 and the barrier after it.
template <int kNw>
__device__ __forceinline__ void one_token_lists(const Params& p, OneTokenPlan& plan, int warp, int lane, OneTokenX& xv) {
  pdl_wait();
  pdl_trigger();
  one_token_x_load<kNw>(p, warp, lane, xv);
  if (warp == 0) one_token_plan(p, plan);
  __syncthreads();
}
template <int kNw>
__device__ __forceinline__ void one_token_x_done(const Params& p, int warp, int lane, const OneTokenX& xv) {
  one_token_x_store<kNw>(p, warp, lane, xv);
  __threadfence_block();
  __syncthreads();
}

// Which items a launch of moe_one_token_kernel runs: all of them (variant 18), or the gate+up
// items and then, in a second launch, the down items (variant 19: the down launch's code and
// first weights are fetched while the gate+up launch runs — programmatic dependent launch — and
// its grid dependency replaces the per-expert wait).
constexpr int kOneTokenAll = 0, kOneTokenUp = 1, kOneTokenDown = 2;

// One CTA per SM (grid = SMs: all CTAs resident at once), kNw warps × kNs-stage rings
// (GemmShape{kNw, kNs}.smem() bytes of dynamic shared memory). Params as moe_grouped_forward
// fills them, with T = 1, 1 ≤ k + has_shared, k ≤ kTok, xq / xs holding ≥ gridDim.x rows.
// kDiag (benchmarks, wrong results): the moe_gemm_kernel diagnostics (load-only, skeleton).
template <int kNw, int kNs, int kPhase = kOneTokenAll, int kDiag = kDiagNone, bool kDryCode = false>
__global__ void __launch_bounds__(kNw * 32, 1) moe_one_token_kernel(const __grid_constant__ Params p) {
  static_assert(kNw % 4 == 0, "whole warpgroups");
  constexpr int kNg = kNw / 4;
  constexpr int kBq = kNw >= 16 ? 2 : kNw >= 12 ? 4 : 8;  // moe_gemm_kernel's
  constexpr int kGs = group_stage_bytes(kTok);
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ OneTokenPlan plan;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, grp = warp >> 2, wt = threadIdx.x & 127;
  const int bar = 1 + grp;
  uint8_t* gsm = smem + grp * kNs * kGs;
  uint8_t* wsm = smem + kNg * kNs * kGs + warp * kNs * kWarpStageBytes;
  const int gu = p.I / 64, gd = p.D / 128;  // tile groups of a chunk: gate+up, down
  const int wg = grp * gridDim.x + blockIdx.x;  // this warpgroup's index in the grid
  int item = wg;
  bool w_pre = false;
  if constexpr (kPhase != kOneTokenDown) probe_stamp(p, wg, kPrEntry, wt);
  if constexpr (kPhase == kOneTokenDown) {
    // The down launch: the lists and the first item's weights before the grid dependency
    // resolves (the gate+up launch passed its pdl_wait before it triggered this grid, so the
    // router's ids are complete; read through L2).
    if (warp == 0) one_token_plan(p, plan);
    __syncthreads();
    if (diag_copies_weights(kDiag) && item < plan.nch * gd) {
      const int ci = item / gd, tile = (item - ci * gd) * 4 + (warp & 3);
      prefetch_down_weights<kNs>(p, plan.ch[ci].expert, tile, wsm, lane);
      w_pre = true;
    }
    pdl_wait();
    pdl_trigger();
    probe_stamp(p, wg, kPrReady, wt);  // h ready: the gate+up launch is complete
  }
  // The gate+up launch's prologue: the shared expert's first weights, the grid dependency, the
  // lists, the routed first item's weights, x's Q8.
  auto up_prologue = [&]() {
    // Before the grid dependency resolves: the shared expert's gate+up items come first
    // whatever the routing, so their weights may stream already.
    if (diag_copies_weights(kDiag) && p.has_shared && item < 2 * gu) {
      prefetch_item_weights<true, true, kNs>(p, p.E + item / gu, (item % gu) * 4 + (warp & 3), wsm, lane);
      w_pre = true;
    }
    OneTokenX xv;
    one_token_lists<kNw>(p, plan, warp, lane, xv);
    probe_stamp(p, wg, kPrPlan, wt);
    if (diag_copies_weights(kDiag) && !w_pre && item < plan.nch * gu) {  // a routed first item: its weights before x's Q8
      prefetch_item_weights<true, false, kNs>(p, plan.ch[item / gu].expert, (item % gu) * 4 + (warp & 3), wsm,
                                              lane);
      w_pre = true;
    }
    one_token_x_done<kNw>(p, warp, lane, xv);
    probe_stamp(p, wg, kPrXq, wt);
  };
  // kDryCode (variant 22, kOneTokenAll): the loop's first two passes run the routed gate+up and
  // down bodies dry before the prologue — before the grid dependency resolves — so that their
  // code is in the SM's instruction caches before the weight stream competes with its fetch
  // (docs/moe-grouped.md round 21). dry_pass is opaque to the compiler, so the dry passes run
  // the same inlined instructions as the real items.
  static_assert(!kDryCode || kPhase == kOneTokenAll, "dry passes in the one-launch form only");
  int dry_pass = 0;
  if constexpr (kDryCode) asm volatile("mov.b32 %0, 2;\n" : "=r"(dry_pass));
  int up_items = 0, total = 0;  // after the lists are read
  auto count_items = [&]() {
    up_items = kPhase == kOneTokenDown ? 0 : plan.nch * gu;
    total = up_items + (kPhase == kOneTokenUp ? 0 : plan.nch * gd);
  };
  if constexpr (!kDryCode) {
    if constexpr (kPhase != kOneTokenDown) up_prologue();
    count_items();
  }
  for (;;) {
    const bool dry = kDryCode && dry_pass > 0;
    if (!dry && item >= total) break;
    if (dry ? dry_pass == 2 : item < up_items) {
      const int ci = dry ? 0 : item / gu, tile = dry ? (warp & 3) : (item - ci * gu) * 4 + (warp & 3);
      const Chunk ch = dry ? Chunk{0, 0, 1} : plan.ch[ci];
      if (!dry && ch.expert >= p.E)
        moe_item<true, true, kNs, kDiag, kBq, kTok, true>(p, ch, ci, tile, wsm, gsm, bar, wt, w_pre, &plan, false);
      else
        moe_item<true, false, kNs, kDiag, kBq, kTok, true>(p, ch, ci, tile, wsm, gsm, bar, wt, w_pre || dry, &plan, dry);
    } else {
      const int d = item - up_items, ci = dry ? 0 : d / gd, tile = dry ? (warp & 3) : (d - ci * gd) * 4 + (warp & 3);
      const Chunk ch = dry ? Chunk{0, 0, 1} : plan.ch[ci];
      const bool fp8 = !dry && ch.expert >= p.E;
      if (!dry) {
        if (diag_copies_weights(kDiag) && !w_pre) prefetch_down_weights<kNs>(p, ch.expert, tile, wsm, lane);
        if constexpr (kPhase == kOneTokenAll) {  // the down launch's grid dependency already waited
          const bool first_down = item - int(gridDim.x) * kNg < up_items;  // the previous item was gate+up or none
          if (first_down && item >= int(gridDim.x) * kNg) probe_stamp(p, wg, kPrUp, wt);  // it ran a gate+up item
          wait_h_ready(p.sync1 + (fp8 ? 0 : ci), one_token_h_count(p, fp8, false), wt, bar);
          if (first_down) probe_stamp(p, wg, kPrReady, wt);
        }
      }
      if (fp8)
        moe_item<false, true, kNs, kDiag, kBq, kTok, true>(p, ch, ci, tile, wsm, gsm, bar, wt, true, &plan, false);
      else
        moe_item<false, false, kNs, kDiag, kBq, kTok, true>(p, ch, ci, tile, wsm, gsm, bar, wt, true, &plan, dry);
    }
    if (dry) {
      if (--dry_pass == 0) {  // the dry passes are done: the real prologue, then the real items
        up_prologue();
        count_items();
      }
    } else {
      item += gridDim.x * kNg;
      w_pre = false;
    }
  }
  const int last = item - int(gridDim.x) * kNg;  // the last item run (< 0: none)
  if (last >= 0) probe_stamp(p, wg, last >= up_items ? kPrDown : kPrUp, wt);
  probe_stamp(p, wg, kPrExit, wt);
}

}  // namespace dsv4::gpu::moe4
