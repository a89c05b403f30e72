// The one-token launch with the two warpgroups of a CTA in fixed roles (pipeline variants 23 and
// 24; docs/moe-grouped.md round 22): most of the down weights stream while the gate+up items run,
// instead of after h is ready. sm_90a only; included by sm90_moe_fp4.cu after
// sm90_moe_one_token.cuh, whose kernel (variant 18) it reorganizes: the same items, rings, math
// and epilogues (moe_item<kT1>), so the same bits.
//
// Why: in 18 a down item can issue only its first 3 of 8 weight stages before its expert's h is
// ready, so ~60 % of the down bytes (16 MB at T = 1 routed only) stream after the gate+up
// phase's last stage, behind its epilogue and h's readiness (round 21's probe: last gate+up
// stage in 28.4 µs, h ready 34.9, down done 43.5). Here the CTA's second warpgroup holds a
// 7-stage down ring, so 6 of a down item's 8 stages come in during the gate+up phase.
//
// Roles (grid G = SMs, one CTA per SM, all resident; 8 warps):
//   WG0, gate+up (4-stage rings, 18's): gate+up items blockIdx.x + i·G, then the down items past
//     the first G ("extras" e = 0, 1, …, dealt from the last CTA down — CTA G − 1 − e mod G —
//     so that CTAs with fewer gate+up items take them), each waiting for its expert's h.
//   WG1, down (7-stage rings): down item blockIdx.x (none past the chunks' down items). Its
//     first 6 stages are issued once the lists are read (a shared-expert item's before the grid
//     dependency), then it runs its body once dry (moe_item's dry run: the same instructions,
//     nothing stored, so its code is in the SM when h is ready) and waits for its expert's h.
// Gate+up items never wait and every CTA is resident: no deadlock. kDryUp (variant 24): WG0 also
// runs variant 22's dry passes (its routed gate+up and down bodies) before the prologue.
// kQ8Down (variant 25): h's Q8 moves from the gate+up epilogue (a block's last warp reading 128
// values back from L2) to the down items, which quantize their chunk's whole h into a whole-K
// activation area once every gate+up warp of the chunk has published its rows (moe_item).
// Shared memory: activation rings WG0 then WG1, then the weight rings of WG0's warps, WG1's.
#pragma once

#include <cstdint>

#include "gpu/sm90_moe_gemm.cuh"
#include "gpu/sm90_moe_group.cuh"
#include "gpu/sm90_moe_one_token.cuh"

namespace dsv4::gpu::moe4 {

constexpr int kRolesWarps = 8, kRolesUpStages = 4, kRolesDownStages = 7;
constexpr int kRolesMaxI = 2048;  // kQ8Down: whole-K activation areas of kRolesMaxI / 256 stages
// Activation stages of WG0 / WG1: rings of kRolesUpStages / kRolesDownStages, or with kQ8Down
// areas of the down items' whole K.
__host__ __device__ constexpr int roles_act_stages(bool q8_down, int grp) {
  return q8_down ? kRolesMaxI / 256 : grp == 0 ? kRolesUpStages : kRolesDownStages;
}
// The weight rings start at a 1 KB boundary after the activation rings.
__host__ __device__ constexpr int roles_weights_off(bool q8_down) {
  return ((roles_act_stages(q8_down, 0) + roles_act_stages(q8_down, 1)) * group_stage_bytes(kTok) + 1023) / 1024 * 1024;
}
__host__ __device__ constexpr int roles_smem(bool q8_down) {  // 215,040 / 226,304 B
  return roles_weights_off(q8_down) + 4 * (kRolesUpStages + kRolesDownStages) * kWarpStageBytes;
}
static_assert(kRolesDownStages < 8, "a down ring of the whole K (8 stages) does not fit beside WG0's");
static_assert(roles_smem(true) + 1024 <= 227 * 1024, "the opt-in shared memory of an sm_90 CTA");

// kQ8Down (variant 25): h's Q8 in the down items (moe_item's kQ8Down); p.I ≤ kRolesMaxI.
template <bool kDryUp, bool kQ8Down = false>
__global__ void __launch_bounds__(kRolesWarps * 32, 1) moe_one_token_roles_kernel(const __grid_constant__ Params p) {
  constexpr int kNw = kRolesWarps, kNsUp = kRolesUpStages, kNsDn = kRolesDownStages;
  constexpr int kBq = 8;  // moe_gemm_kernel's at 8 warps
  constexpr int kGs = group_stage_bytes(kTok);
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ OneTokenPlan plan;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, grp = warp >> 2, wt = threadIdx.x & 127;
  const int bar = 1 + grp, G = int(gridDim.x), b = int(blockIdx.x);
  uint8_t* gsm = smem + (grp == 0 ? 0 : roles_act_stages(kQ8Down, 0) * kGs);
  uint8_t* wsm = smem + roles_weights_off(kQ8Down) +
                 (grp == 0 ? warp * kNsUp : 4 * kNsUp + (warp - 4) * kNsDn) * kWarpStageBytes;
  const int gu = p.I / 64, gd = p.D / 128;  // tile groups of a chunk: gate+up, down
  const int wg = grp * G + b;               // the probe's warpgroup index
  bool w_pre = false;                       // this warpgroup's first item's weights are issued
  probe_stamp(p, wg, kPrEntry, wt);

  // Both warpgroups (it has CTA barriers): the first weights, the grid dependency, the lists, x's
  // Q8. WG0's first item is gate+up item b, WG1's is down item b; the shared expert's chunks come
  // first whatever the routing (experts E, E + 1: one_token_plan), so theirs stream before the
  // grid dependency resolves.
  auto prologue = [&]() {
    if (p.has_shared) {
      if (grp == 0 && b < 2 * gu) {
        prefetch_item_weights<true, true, kNsUp>(p, p.E + b / gu, (b % gu) * 4 + (warp & 3), wsm, lane);
        w_pre = true;
      }
      if (grp == 1 && b < 2 * gd) {
        prefetch_down_weights<kNsDn>(p, p.E + b / gd, (b % gd) * 4 + (warp & 3), wsm, lane);
        w_pre = true;
      }
    }
    pdl_wait();
    pdl_trigger();
    OneTokenX xv;
    one_token_x_load<kNw>(p, warp, lane, xv);
    if (warp == 0) one_token_plan(p, plan);
    __syncthreads();
    probe_stamp(p, wg, kPrPlan, wt);
    if (!w_pre && grp == 0 && b < plan.nch * gu) {
      prefetch_item_weights<true, false, kNsUp>(p, plan.ch[b / gu].expert, (b % gu) * 4 + (warp & 3), wsm, lane);
      w_pre = true;
    }
    if (!w_pre && grp == 1 && b < plan.nch * gd) {
      prefetch_down_weights<kNsDn>(p, plan.ch[b / gd].expert, (b % gd) * 4 + (warp & 3), wsm, lane);
      w_pre = true;
    }
    one_token_x_store<kNw>(p, warp, lane, xv);
    __threadfence_block();
    __syncthreads();
    probe_stamp(p, wg, kPrXq, wt);
  };

  if (grp == 1) {
    // ---- WG1: down item b ----
    prologue();
    if (b < plan.nch * gd) {
      const int ci = b / gd, tile = (b - ci * gd) * 4 + (warp & 3);
      const Chunk ch = plan.ch[ci];
      const bool fp8 = ch.expert >= p.E;
      int dry_pass;  // opaque: the dry pass runs the real pass's instructions (docs/moe-grouped.md round 21)
      asm volatile("mov.b32 %0, 1;\n" : "=r"(dry_pass));
      for (;;) {
        const bool dry = dry_pass > 0;
        if (!dry) {
          wait_h_ready(p.sync1 + (fp8 ? 0 : ci), one_token_h_count(p, fp8, kQ8Down), wt, bar);
          probe_stamp(p, wg, kPrReady, wt);
        }
        if (fp8)
          moe_item<false, true, kNsDn, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt, true, &plan, dry);
        else
          moe_item<false, false, kNsDn, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt, true, &plan,
                                                                    dry);
        if (!dry) break;
        --dry_pass;
      }
      probe_stamp(p, wg, kPrDown, wt);
    }
    probe_stamp(p, wg, kPrExit, wt);
    return;
  }

  // ---- WG0: gate+up items, then the extra down items ----
  // kDryUp: the first two passes run the routed gate+up and down bodies dry (variant 22), then
  // the prologue; dry_pass is opaque, so they are the real items' instructions.
  int dry_pass = 0;
  if constexpr (kDryUp) asm volatile("mov.b32 %0, 2;\n" : "=r"(dry_pass));
  int n_up = 0, my_up = 0, n_extra = 0;  // after the lists are read
  auto count_items = [&]() {
    n_up = plan.nch * gu;
    my_up = b < n_up ? (n_up - 1 - b) / G + 1 : 0;
    n_extra = max(plan.nch * gd - G, 0);
  };
  if (dry_pass == 0) {
    prologue();
    count_items();
  }
  bool ran_up = false, ran_down = false;
  for (int i = 0;;) {
    const bool dry = kDryUp && dry_pass > 0;
    int d = -1;  // the down item of this pass, if not a gate+up one
    if (!dry && i >= my_up) {
      const int e = (G - 1 - b) + (i - my_up) * G;
      if (e >= n_extra) break;
      d = G + e;
    }
    if (dry ? dry_pass == 2 : d < 0) {
      const int item = b + i * G;
      const int ci = dry ? 0 : item / gu, tile = dry ? (warp & 3) : (item - ci * gu) * 4 + (warp & 3);
      const Chunk ch = dry ? Chunk{0, 0, 1} : plan.ch[ci];
      if (!dry && ch.expert >= p.E)
        moe_item<true, true, kNsUp, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt, w_pre, &plan,
                                                                false);
      else
        moe_item<true, false, kNsUp, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt, w_pre || dry,
                                                                 &plan, dry);
      ran_up = ran_up || !dry;
    } else {
      const int ci = dry ? 0 : d / gd, tile = dry ? (warp & 3) : (d - ci * gd) * 4 + (warp & 3);
      const Chunk ch = dry ? Chunk{0, 0, 1} : plan.ch[ci];
      const bool fp8 = !dry && ch.expert >= p.E;
      if (!dry) {
        if (!w_pre) prefetch_down_weights<kNsUp>(p, ch.expert, tile, wsm, lane);
        if (!ran_down && ran_up) probe_stamp(p, wg, kPrUp, wt);
        wait_h_ready(p.sync1 + (fp8 ? 0 : ci), one_token_h_count(p, fp8, kQ8Down), wt, bar);
        if (!ran_down) probe_stamp(p, wg, kPrReady, wt);
        ran_down = true;
      }
      if (fp8)
        moe_item<false, true, kNsUp, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt, true, &plan,
                                                                 false);
      else
        moe_item<false, false, kNsUp, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt, true, &plan,
                                                                  dry);
    }
    if (dry) {
      if (--dry_pass == 0) {  // the dry passes are done: the real prologue, then the real items
        prologue();
        count_items();
      }
    } else {
      ++i;
      w_pre = false;
    }
  }
  if (ran_down) probe_stamp(p, wg, kPrDown, wt);
  else if (ran_up) probe_stamp(p, wg, kPrUp, wt);
  probe_stamp(p, wg, kPrExit, wt);
}

}  // namespace dsv4::gpu::moe4
