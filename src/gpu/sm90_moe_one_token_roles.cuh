// The one-token launch with a down warpgroup per CTA holding most of a down item's weights
// before h is ready (pipeline variants 23–25; docs/moe-grouped.md round 22). sm_90a only;
// included by sm90_moe_fp4.cu after sm90_moe_one_token.cuh, whose kernel (variant 18) it
// reorganizes: the same items, rings, math and epilogues (moe_item<kT1>), so the same bits.
// Measured slower than 18 and 7 (H100, docs/moe-grouped.md round 22: the early down loads push
// the gate+up stream back and the extras keep 18's tail); kept as a measured reference.
//
// Why: in 18 a down item can issue only its first 3 of 8 weight stages before its expert's h is
// ready, so ~60 % of the down bytes (16 MB at T = 1 routed only) stream after the gate+up
// phase's last stage, behind its epilogue and h's readiness (round 21's probe: last gate+up
// stage in 28.4 µs, h ready 34.9, down done 43.5), while the gate+up phase itself leaves ~14 % of
// the HBM unused. Here each CTA's second warpgroup holds 7-stage down rings, so 6 of its down
// item's 8 stages come in during the gate+up phase.
//
// Jobs (grid G = SMs, one CTA per SM, all resident; 8 warps = warpgroups WG0, WG1):
//   * gate+up items dealt round-robin over all 2G warpgroups (warpgroup grp·G + b takes items
//     grp·G + b + 2G·i), as 18 deals them: at T = 1 no warpgroup chains two (192 routed items);
//   * then WG1 of CTA b: down item b on its 7-stage rings — its first 6 stages issued as soon as
//     its gate+up items are done (right after the lists if it has none), its body run once dry
//     (moe_item's dry run: the same instructions, nothing stored, so its code is in the SM when h
//     arrives), then for real once its expert's h is ready;
//   * then WG0 of CTA b: the extra down items G + e, e = G − 1 − b + m·G (the CTAs whose WG1 had
//     no gate+up item first), on its 4-stage rings as in 18.
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
  const int wg = grp * G + b;               // this warpgroup's index (gate+up dealing, probe)
  bool w_pre = false;                       // the next job's first weight stages are issued
  probe_stamp(p, wg, kPrEntry, wt);

  // This warpgroup's jobs, in order, once the lists are read: gate+up items wg, wg + 2G, … (18's
  // dealing over all warpgroups, so no warpgroup chains two gate+up items at T = 1 on ≥ 96 SMs);
  // then WG1 down item b on its kNsDn-stage rings, WG0 the extra down items G + e on its
  // kNsUp-stage rings, e = G − 1 − b + m·G (the CTAs whose WG1 has no gate+up item first).
  enum Job : int { kUpJob, kDownRing, kDownWhole, kNoJob };
  int n_up = 0, n_dn = 0, my_up = 0;
  auto job = [&](int i, int& item) -> int {
    if (i < my_up) {
      item = wg + i * 2 * G;
      return kUpJob;
    }
    const int m = i - my_up;
    if (grp == 1) {
      item = b;
      return m == 0 && b < n_dn ? kDownWhole : kNoJob;
    }
    const int e = (G - 1 - b) + m * G;
    item = G + e;
    return e < n_dn - G ? kDownRing : kNoJob;
  };
  // A job's first weight stages (moe_item's w_pre), on the ring depth the job runs with.
  auto prefetch_job = [&](int kind, int item) {
    if (kind == kUpJob) {
      const int expert = plan.ch[item / gu].expert, tile = (item % gu) * 4 + (warp & 3);
      if (expert >= p.E) prefetch_item_weights<true, true, kNsUp>(p, expert, tile, wsm, lane);
      else prefetch_item_weights<true, false, kNsUp>(p, expert, tile, wsm, lane);
    } else if (kind != kNoJob) {
      const int expert = plan.ch[item / gd].expert, tile = (item % gd) * 4 + (warp & 3);
      if (kind == kDownWhole) prefetch_down_weights<kNsDn>(p, expert, tile, wsm, lane);
      else prefetch_down_weights<kNsUp>(p, expert, tile, wsm, lane);
    }
  };

  // Both warpgroups (it has CTA barriers): the grid dependency, the lists, the first job's
  // weights, x's Q8. WG0's first job is gate+up item b; the shared expert's chunks come first
  // whatever the routing (experts E, E + 1: one_token_plan), so a shared item's weights stream
  // before the grid dependency resolves.
  auto prologue = [&]() {
    if (p.has_shared && grp == 0 && b < 2 * gu) {
      prefetch_item_weights<true, true, kNsUp>(p, p.E + b / gu, (b % gu) * 4 + (warp & 3), wsm, lane);
      w_pre = true;
    }
    OneTokenX xv;
    one_token_lists<kNw>(p, plan, warp, lane, xv);
    probe_stamp(p, wg, kPrPlan, wt);
    n_up = plan.nch * gu;
    n_dn = plan.nch * gd;
    my_up = wg < n_up ? (n_up - 1 - wg) / (2 * G) + 1 : 0;
    if (!w_pre) {
      int item = 0;
      const int kind = job(0, item);
      prefetch_job(kind, item);
      w_pre = kind != kNoJob;
    }
    one_token_x_done<kNw>(p, warp, lane, xv);
    probe_stamp(p, wg, kPrXq, wt);
  };

  // kDryUp: WG0's first two passes run the routed gate+up and down bodies dry (variant 22), then
  // the prologue; dry_pass is opaque, so they are the real jobs' instructions.
  int dry_pass = 0;
  if constexpr (kDryUp) {
    int two;
    asm volatile("mov.b32 %0, 2;\n" : "=r"(two));
    dry_pass = grp == 0 ? two : 0;
  }
  if (dry_pass == 0) prologue();
  bool ran_up = false, ran_down = false;
  for (int i = 0;;) {
    const bool dry = kDryUp && dry_pass > 0;
    int item = 0;
    const int kind = dry ? (dry_pass == 2 ? int(kUpJob) : int(kDownRing)) : job(i, item);
    if (kind == kNoJob) break;
    if (kind == kUpJob) {
      const int ci = dry ? 0 : item / gu, tile = dry ? (warp & 3) : (item - ci * gu) * 4 + (warp & 3);
      const Chunk ch = dry ? Chunk{0, 0, 1} : plan.ch[ci];
      if (!dry && ch.expert >= p.E)
        moe_item<true, true, kNsUp, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt, w_pre,
                                                                         &plan, false);
      else
        moe_item<true, false, kNsUp, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt,
                                                                          w_pre || dry, &plan, dry);
      ran_up = ran_up || !dry;
    } else {
      const bool whole = kind == kDownWhole;
      const int ci = dry ? 0 : item / gd, tile = dry ? (warp & 3) : (item - ci * gd) * 4 + (warp & 3);
      const Chunk ch = dry ? Chunk{0, 0, 1} : plan.ch[ci];
      const bool fp8 = !dry && ch.expert >= p.E;
      if (!dry) {
        if (!w_pre) prefetch_job(kind, item);
        if (!ran_down && ran_up) probe_stamp(p, wg, kPrUp, wt);
      }
      if (whole) {
        // WG1's down item: its body once dry while the other warpgroups stream (its code in the
        // SM when h arrives), then for real; dry_whole is opaque (one call site, the same code).
        int dry_whole;
        asm volatile("mov.b32 %0, 1;\n" : "=r"(dry_whole));
        for (;;) {
          const bool dw = dry_whole > 0;
          if (!dw) {
            wait_h_ready(p.sync1 + (fp8 ? 0 : ci), one_token_h_count(p, fp8, kQ8Down), wt, bar);
            if (!ran_down) probe_stamp(p, wg, kPrReady, wt);
          }
          if (fp8)
            moe_item<false, true, kNsDn, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt,
                                                                              true, &plan, dw);
          else
            moe_item<false, false, kNsDn, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt,
                                                                               true, &plan, dw);
          if (!dw) break;
          --dry_whole;
        }
      } else {
        if (!dry) {
          wait_h_ready(p.sync1 + (fp8 ? 0 : ci), one_token_h_count(p, fp8, kQ8Down), wt, bar);
          if (!ran_down) probe_stamp(p, wg, kPrReady, wt);
        }
        if (fp8)
          moe_item<false, true, kNsUp, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt, true,
                                                                            &plan, false);
        else
          moe_item<false, false, kNsUp, kDiagNone, kBq, kTok, true, kQ8Down>(p, ch, ci, tile, wsm, gsm, bar, wt, true,
                                                                             &plan, dry);
      }
      ran_down = ran_down || !dry;
    }
    if (dry) {
      if (--dry_pass == 0) prologue();  // the dry passes are done: the real prologue, then the jobs
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
