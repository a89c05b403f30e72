// The grouped MoE's gemm kernel of phases 1 (gate+up) and 2 (down) for decode-sized calls: a
// warpgroup item's ring, mainloop and epilogues (sm90_moe_fp4.cuh has the design, the shared
// definitions and the math of one stage). sm_90a only.
#pragma once

#include <climits>
#include <cstdint>

#include "gpu/sm90_moe_fp4.cuh"
#include "gpu/sm90_moe_group.cuh"  // the one-token plan and epilogues (moe_item<kT1>)

namespace dsv4::gpu::moe4 {

// One warp's part of a warpgroup item of phase 1 (kUp) or phase 2 over the whole K, 8 token
// slots, kNs-stage cp.async rings; every stage is 4 KB of weights per warp and 256 K of the
// chunk's activations per warpgroup:
//   FP4 (routed): 32 weight rows × 128 B (up: 16 w1 + 16 w3 rows; down: 32 w2 rows), 2 m-tiles.
//   FP8 (shared): 16 weight rows × 256 B (up: 8 w1 + 8 w3 rows packed in one m-tile, rows g and
//                 g+8 of the tile are w1/w3 row row0+g; down: 16 w2 rows), 1 m-tile.
// So both kinds stream the same bytes per warp (balanced at batch 1). All 4 warps of the
// warpgroup run this together on the same chunk (tiles 4j..4j+3; `bar` its barrier id, wt the
// thread's index in it). `sub` of the FP8 rows: shared chunks appear twice, experts E and E+1.
// Only the chunk's live tokens (ch.n) are copied; the stale slots only feed MMA columns that
// are never stored. wsm: the warp's weight ring, gsm: the warpgroup's activation ring.
// w_pre: the weights of stages 0..kNs−2 were already issued as one commit group (the
// kernel's prologue before the grid dependency resolved).
// Ring order per stage s: wait for stage s (own copies), proxy fence, warpgroup barrier (all
// copies of s visible, all warps done with stage s−1), then refill the slot of s−1, then math.
// kT1 (moe_one_token_kernel, sm90_moe_one_token.cuh): the token's x codes are row blockIdx.x of
// xq / xs (the CTA's own copy), the routing weights plan->pw, and the epilogues also publish h's
// readiness per expert (gate+up) and combine each 128-row block of y once all its rows are in
// (down).
// kQ8Down (kT1 only; the roles kernel's variant 25): h's Q8 moves from the gate+up epilogue to the
// down item. A gate+up warp publishes its rows of h (fp32) with one release add on its chunk's key
// (no block counter, no read-back); a down item, once its key is full (one_token_h_count), loads
// h and quantizes it with the same arithmetic (q8_block_to_stage) into a whole-K activation area
// of K/256 stages (gsm; nothing copied per stage), so the same bits.
template <bool kUp, bool kFp8, int kNs, int kDiag, int kBq, int kN, bool kT1 = false, bool kQ8Down = false>
__device__ __forceinline__ void moe_item(const Params& p, const Chunk& ch, int ci, int tile, uint8_t* wsm,
                                         uint8_t* gsm, int bar, int wt, bool w_pre,
                                         const OneTokenPlan* plan = nullptr, bool dry_run = false) {
  // kT1's dry run (moe_one_token_kernel's code warm-up): one stage of math on whatever the ring
  // holds, no copies, no waits, no global stores — the same instructions fetched, nothing changed.
  static_assert(!kQ8Down || kT1, "the down-side Q8 is the one-token launch's");
  constexpr bool kActsWhole = kQ8Down && !kUp;  // activations in a whole-K area, not a ring
  const bool dry = kT1 && dry_run;
  constexpr int kJ = kN / 8;                  // n8 column blocks of the wgmma (1 or 4)
  constexpr int kGs = group_stage_bytes(kN), kXs = group_stage_xs(kN);
  const ExpertPtrs ex = kFp8 ? p.shared : p.experts[ch.expert];
  const int K = kUp ? p.D : p.I;
  const int nst = dry ? 1 : K / 256;               // stages (256 K each)
  const int row0 = item_row0<kUp, kFp8>(p, ch.expert, tile);
  const ItemWeights iw = item_weights<kUp, kFp8>(p, ex, row0);
  const uint8_t *sA = iw.sA, *sB = iw.sB;  // FP8: block-row scales
  const int lane = wt & 31;
  // Activations this thread copies: token slots tn + 8u (u < kJ), 16-byte granule tq of each
  // stage; the scales of token slot wt (wt < chunk size).
  const int tn = wt & 7, tq = wt >> 3;
  auto act_row = [&](int slot) {
    const int i = min(slot, ch.n - 1);
    return kUp ? (kT1 ? int(blockIdx.x) : p.pos_token[ch.pos + i]) : ch.pos + i;
  };
  const uint8_t* asrc[kJ];
#pragma unroll
  for (int u = 0; u < kJ; ++u) asrc[u] = (kUp ? p.xq : p.hq) + size_t(act_row(tn + 8 * u)) * K + tq * 16;
  const float* ssrc = (kUp ? p.xs : p.hs) + size_t(act_row(min(wt, kN - 1))) * (K / 128);

  auto issue = [&](int s, bool weights) {
    if (dry) return;
    if (s < nst) {
      uint8_t* gs = gsm + (s % kNs) * kGs;
      if (weights && diag_copies_weights(kDiag)) issue_weights<kUp, kFp8>(iw, s, wsm + (s % kNs) * kWarpStageBytes, lane);
      if constexpr (!kActsWhole) {
#pragma unroll
        for (int u = 0; u < kJ; ++u)
          if (tn + 8 * u < ch.n) cp_async16(gs + tq * (kN * 16) + (tn + 8 * u) * 16, asrc[u] + s * 256);
        if (wt < ch.n) cp8(gs + kXs + wt * 8, ssrc + 2 * s);
      }
    }
    cp_commit();
  };

  const int g = lane >> 2, t = lane & 3;
  // acc[mt][4j + 2r + c]: m-tile mt, row g + 8r, token slot 8j + 2t + c. FP4: in units of
  // S = 2⁶·s_x of the current 128-K block (cur[j][c] = s_x of that token slot).
  float acc[2][4 * kJ] = {};
  float cur[kJ][2];
#pragma unroll
  for (int j = 0; j < kJ; ++j) cur[j][0] = cur[j][1] = 1.0f;
#pragma unroll
  for (int s = 0; s < kNs - 1; ++s) issue(s, !w_pre);
  if constexpr (kActsWhole) {  // h's Q8 for every K block and live token slot (the stage loop's first barrier publishes it)
    const int w4 = wt >> 5;
    for (int qb = w4; qb < K / 128; qb += 4)
      for (int i = 0; i < ch.n; ++i)
        q8_block_to_stage<kN>(__ldcg(reinterpret_cast<const float4*>(p.h + size_t(ch.pos + i) * K + qb * 128 + lane * 4)),
                              lane, qb * 128, gsm, i);
  }
  for (int s = 0; s < nst; ++s) {
    if (!dry) cp_wait<kNs - 2>();
    fence_proxy_async();
    group_sync(bar);
    if constexpr (kT1 && kUp)  // the probe: when stages 0, 4, 8, 12 and the last are in
      if (!dry && ((s & 3) == 0 || s == nst - 1)) {
        const int ev = kPrStage0 + (s == nst - 1 ? kPrStages - 1 : min(s >> 2, kPrStages - 2));
        probe_stamp(p, (bar - 1) * gridDim.x + blockIdx.x, ev, wt);
      }
    issue(s + kNs - 1, true);
    if constexpr (!diag_runs_math(kDiag)) continue;  // diagnostics: the weight stream / skeleton alone
    stage_math<kFp8, kBq, kN>(wsm + (s % kNs) * kWarpStageBytes, gsm + (kActsWhole ? s : s % kNs) * kGs, sA, sB, s,
                              lane, acc, cur);
  }
  if (!dry) cp_wait<0>();
  group_sync(bar);  // every warp done with both rings before the next item's prologue refills them
  if constexpr (!kFp8) {  // u → acc = u·S
#pragma unroll
    for (int j = 0; j < kJ; ++j) scale_cols<kJ>(acc, j, cur[j][0] * 64.0f, cur[j][1] * 64.0f);
  }

  if constexpr (kUp) {
    // Gate g and up u of I-row row0 + ir for token slot 8j + 2t + c (FP4: ir = g + 8r from the
    // two m-tiles; FP8: ir = g, the tile's rows g / g+8).
    constexpr int kRows = kFp8 ? 8 : 16;
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int r = 0; r < (kFp8 ? 1 : 2); ++r)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int i = 8 * j + 2 * t + c;
          const float hv = swiglu_h<!kFp8>(kFp8 ? acc[0][4 * j + c] : acc[0][4 * j + 2 * r + c],
                                           kFp8 ? acc[0][4 * j + 2 + c] : acc[1][4 * j + 2 * r + c], p.limit,
                                           kFp8 ? 1.0f : (kT1 ? plan->pw : p.pos_weight)[ch.pos + min(i, ch.n - 1)]);
          if (i < ch.n && !dry) p.h[size_t(ch.pos + i) * p.I + row0 + g + 8 * r] = hv;
        }
    // The last of the 128/kRows items covering this 128-wide I block quantizes it (Q8, per
    // token). All of them belong to chunk entry ci (an FP8 half covers whole blocks).
    const int qb = row0 / 128, nqb = p.I / 128;
    if (dry) return;
    if constexpr (kQ8Down) {  // the down items quantize h: publish this warp's rows
      one_token_h_ready(p, kFp8 ? 0 : ci, lane);
      probe_stamp(p, (bar - 1) * gridDim.x + blockIdx.x, kPrUpEpi, wt);
      return;
    }
    if constexpr (kT1) probe_stamp(p, (bar - 1) * gridDim.x + blockIdx.x, kPrUpEpi0, wt);
    __syncwarp();
    unsigned old = 0;
    if (lane == 0) old = atom_add_acq_rel_gpu(&p.arrive[ci * nqb + qb], 1u);
    old = __shfl_sync(0xffffffffu, old, 0);
    if constexpr (kT1) probe_stamp(p, (bar - 1) * gridDim.x + blockIdx.x, kPrUpArrived, wt);
    if (old == 128 / kRows - 1) {
      __syncwarp();
      for (int i = 0; i < ch.n; ++i) {
        const size_t pos = ch.pos + i;
        const float4 v = __ldcg(reinterpret_cast<const float4*>(p.h + pos * p.I + qb * 128 + lane * 4));
        q8_block_store(v, lane, qb * 128, p.hq + pos * p.I, p.hs + pos * nqb + qb);
      }
      if (lane == 0) p.arrive[ci * nqb + qb] = 0;
      if constexpr (kT1) one_token_h_ready(p, kFp8 ? 0 : ci, lane);
    }
    if constexpr (kT1) probe_stamp(p, (bar - 1) * gridDim.x + blockIdx.x, kPrUpEpi, wt);
  } else {
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int mt = 0; mt < (kFp8 ? 1 : 2); ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int i = 8 * j + 2 * t + c;
            if (i < ch.n && !dry)
              p.y[size_t(ch.pos + i) * p.D + row0 + mt * 16 + g + 8 * r] = round_bf16(acc[mt][4 * j + 2 * r + c]);
          }
    if constexpr (kT1)
      if (!dry) one_token_combine(p, *plan, row0, kFp8 ? 16 : 32, lane);
  }
}

// Before the grid dependency resolves (programmatic dependent launch): issue the weights of
// stages 0..kNs−2 of a warp's first item as one commit group (moe_item's w_pre).
template <bool kUp, bool kFp8, int kNs>
__device__ __forceinline__ void prefetch_item_weights(const Params& p, int expert, int tile, uint8_t* wsm,
                                                      int lane) {
  const ExpertPtrs ex = kFp8 ? p.shared : p.experts[expert];
  const ItemWeights iw = item_weights<kUp, kFp8>(p, ex, item_row0<kUp, kFp8>(p, expert, tile));
  const int nst = (kUp ? p.D : p.I) / 256;
#pragma unroll
  for (int s = 0; s < kNs - 1; ++s)
    if (s < nst) issue_weights<kUp, kFp8>(iw, s, wsm + s * kWarpStageBytes, lane);
  cp_commit();
}
// The same for a down item of either kind (expert ≥ E: the shared expert's FP8 halves).
template <int kNs>
__device__ __forceinline__ void prefetch_down_weights(const Params& p, int expert, int tile, uint8_t* wsm, int lane) {
  if (expert >= p.E) prefetch_item_weights<false, true, kNs>(p, expert, tile, wsm, lane);
  else prefetch_item_weights<false, false, kNs>(p, expert, tile, wsm, lane);
}

// The expert of routed chunk r (counted after the shared ones) of a one-token call, or −1: the
// token's distinct (clamped) expert ids in ascending order — the group kernel's chunk order, one
// chunk per expert when k ≤ the chunk size. Read from ids before the grid dependency resolves: the router
// that wrote them completed before the group launch passed its own pdl_wait and triggered this
// grid (__ldcg: through L2).
__device__ __forceinline__ int one_token_chunk_expert(const Params& p, int r) {
  int e[kMaxTopK];  // the slots' experts, then INT_MAX
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) e[j] = j < p.k ? min(max(__ldcg(p.ids + j), 0), p.E - 1) : INT_MAX;
  int prev = -1;  // the (step)-th smallest distinct expert
  for (int step = 0; step <= r; ++step) {
    int cur = INT_MAX;
#pragma unroll
    for (int j = 0; j < kMaxTopK; ++j) cur = e[j] > prev ? min(cur, e[j]) : cur;
    if (cur == INT_MAX) return -1;
    prev = cur;
  }
  return prev;
}

// Phases 1 (kUp) and 2: persistent, kNw warps (kNw/4 warpgroups) per CTA, one CTA per SM;
// global warpgroup j takes items j, j + G, … (G = all warpgroups); an item is (chunk, 4
// consecutive row tiles), warp w of the warpgroup takes tile 4·(item's tile group) + w;
// consecutive items are consecutive tile groups of one chunk, spread over different CTAs.
// Row tiles per chunk (I/16, D/32) are multiples of 4 for the supported shapes (multiples of
// 256). Shared memory: GemmShape::smem() = the warpgroups' activation rings, then the warps'
// weight rings. kDiag (benchmark diagnostics, wrong results): kDiagLoadOnly the same copies
// without the math, kDiagMathOnly the math on whatever the ring holds without copying weights
// (activations still copied), kDiagSkeleton neither (what the structure costs without them).
// Under programmatic dependent launch the first item's weights start streaming before
// pdl_wait(): gate+up when it is a shared-expert item (chunks 0..shared_chunks(T, kN)−1 whatever
// the routing), down always (its chunk list was written by the group kernel, which completed
// before any gate+up CTA passed its pdl_wait and triggered this grid; read through L2).
template <bool kUp, int kNw, int kNs, int kDiag = kDiagNone, int kN = kTok>
__global__ void __launch_bounds__(kNw * 32, 1) moe_gemm_kernel(const __grid_constant__ Params p) {
  static_assert(kNw % 4 == 0, "whole warpgroups");
  static_assert(kN == kTok || kN == kTokWide, "chunks of 8 or 32 tokens");
  constexpr int kNg = kNw / 4;
  // 32-K blocks per wgmma batch (A fragments and partials live until its wait): the whole stage
  // (8) at 8 warps (255 registers), 4 at 12, 2 at 16 warps (128 registers), 1 with 32-token chunks
  // (16 partials each).
  constexpr int kBq = kN > kTok ? 1 : kNw >= 16 ? 2 : kNw >= 12 ? 4 : 8;
  constexpr int kGs = group_stage_bytes(kN);
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, grp = warp >> 2, wt = threadIdx.x & 127;
  uint8_t* gsm = smem + grp * kNs * kGs;
  uint8_t* wsm = smem + kNg * kNs * kGs + warp * kNs * kWarpStageBytes;
  const int groups = (kUp ? p.I / 16 : p.D / 32) / 4;  // tile groups per chunk
  int item = grp * gridDim.x + blockIdx.x;
  bool w_pre = false;
  {
    const int ci = item / groups, tile = (item - ci * groups) * 4 + (warp & 3);
    if constexpr (!diag_copies_weights(kDiag)) {
    } else if constexpr (kUp) {
      const int nsc = p.has_shared ? shared_chunks(p.T, kN) : 0;
      if (ci < nsc) {
        prefetch_item_weights<true, true, kNs>(p, p.E + (ci & 1), tile, wsm, lane);
        w_pre = true;
      } else if (p.T == 1 && p.k <= kN) {
        const int expert = one_token_chunk_expert(p, ci - nsc);
        if (expert >= 0) {
          prefetch_item_weights<true, false, kNs>(p, expert, tile, wsm, lane);
          w_pre = true;
        }
      }
    } else if (ci < __ldcg(p.num_chunks)) {
      const int expert = __ldcg(&p.chunks[ci].expert);
      if (expert >= p.E) prefetch_item_weights<false, true, kNs>(p, expert, tile, wsm, lane);
      else prefetch_item_weights<false, false, kNs>(p, expert, tile, wsm, lane);
      w_pre = true;
    }
  }
  pdl_wait();
  pdl_trigger();
  const int total = *p.num_chunks * groups;
  for (; item < total; item += gridDim.x * kNg) {
    const int ci = item / groups, tile = (item - ci * groups) * 4 + (warp & 3);
    const Chunk ch = p.chunks[ci];
    if (ch.expert >= p.E) moe_item<kUp, true, kNs, kDiag, kBq, kN>(p, ch, ci, tile, wsm, gsm, 1 + grp, wt, w_pre);
    else moe_item<kUp, false, kNs, kDiag, kBq, kN>(p, ch, ci, tile, wsm, gsm, 1 + grp, wt, w_pre);
    w_pre = false;
  }
}

}  // namespace dsv4::gpu::moe4
