// Lightning indexer scores + top-k selection for sm_90a (spec §4.6), see sm90_indexer_topk.h.
// Fewer than 64 heads: the q tile is zero-padded to the next 16 heads and only those 16-head
// MMA tiles run; the head sum covers the real heads only. k < 512: the same selection with the
// threshold at the k-th key (the 512-slot sort is unchanged; empty slots sort last).
//
// Design. Kernel 1 (scores): grid (min(ceil(max_visible/256), floor(SMs/rows)), rows), 256
// threads, one CTA per SM; a CTA loops over 256-key blocks (x, x + gridDim.x, ...), each warp
// owning 32 keys of a block, with the next block's keys prefetched (cp.async, two smem stages)
// while the current one is computed; a warp only reads its own key rows, so after the first
// block the warps run decoupled (warp barriers only). The row's q (64 × 128 bf16) is staged in
// smem once per CTA and each warp then holds its MMA B fragments in registers for the whole call;
// the warp cp.asyncs its 32 keys (8 KB) into smem and computes the 32 keys × 64
// heads dots with mma.sync m16n8k16 (A = keys, B = qᵀ, k = 128, fp32 accumulate;
// FP4-simulated operands make these sums exact in practice). The per-head terms
// bf16(ω_h · relu(bf16(dot))) are computed two heads at a time with bf16x2 instructions
// (cvt.rn.relu, mul.rn: 3 instructions per term instead of ~15 for the software rounding) and
// summed in registers where the MMA left them: each lane adds its 16 heads of a key in head
// order, then the lane quad adds its 4 partials (a fixed tree; the CPU adds in head order:
// equal whenever the fp32 sum is exact, which FP4-simulated operands make the rule — tested
// ≤ 0.1% keys differing), the total is rounded to bf16 and stored as an order-preserving
// 16-bit key. The CTA also writes the 256-bin histogram of its keys' high bytes to its own
// slice of the workspace (every CTA of the grid writes all 256 bins, zeros included: no memset
// node and no global atomics; the selection sums a row's slices). (Measured and dropped, docs/attention-decode-rounds.md, round 3: a wgmma
// m64n64k16 scan — 64 keys × 64 heads per warpgroup, both operands in smem, 1–4 warpgroups,
// 3–8 stages — at 38–50% of HBM; 3 stages, and bulk L2 prefetches 2–4 blocks ahead: no gain.)
// Kernel 2 (select, sm90_indexer_select.cu): from the row's histogram slices, the exact k-th
// largest key, the keys above it and the lowest-id ties at it, sorted by (score desc, id asc)
// = cpu::select_topk.
// Both kernels are PDL-launched (pdl.cuh: they wait for their predecessor before any read).
// Bytes: 256 B per key read once; scores 2 B written once and read by the selection (L2-resident).
#include <algorithm>

#include "base/check.h"
#include "base/env.h"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_indexer_topk.h"
#include "gpu/sm90_indexer_select.cuh"
#include "gpu/sm90_sparse_decode.cuh"

namespace dsv4::gpu::sm90 {
namespace {

constexpr int kRowS = kIndexDim + 8;  // bf16 smem row stride (272 B: conflict-free ldmatrix)

size_t keys_bytes(int rows, int max_visible) {
  return (size_t(rows) * size_t(indexer_score_stride(max_visible)) * 2 + 255) / 256 * 256;
}

// Row r's keys [0, visible) (bf16 [*, 128]).
__device__ __forceinline__ const __nv_bfloat16* row_keys(const IndexerArgs& a, int r) {
  if (a.caches != nullptr) return reinterpret_cast<const __nv_bfloat16*>(a.caches[r].index.keys);
  return a.keys + (a.key_base != nullptr ? a.key_base[r] : int64_t{0}) * kIndexDim;
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {  // all but the newest N groups done
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Two heads' terms of one key, bf16(ω·relu(bf16(dot))) for dots d0 (head h) and d1 (head h+1)
// with ω2 = bf16x2 {ω_h (low), ω_h+1 (high)}, as fp32 t0, t1: cvt.rn.relu then mul.rn.bf16x2
// (ω·s is exact in fp32, so its one rounding equals round_bf16 of the fp32 product).
__device__ __forceinline__ void head_terms(float d0, float d1, uint32_t w2, float& t0, float& t1) {
  uint32_t s2, p2;
  asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;\n" : "=r"(s2) : "f"(d1), "f"(d0));
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(p2) : "r"(s2), "r"(w2));
  t0 = __uint_as_float(p2 << 16);
  t1 = __uint_as_float(p2 & 0xffff0000u);
}

// Key w's score key from its head sum `total` (bf16-rounded here), stored with its count in
// the CTA's histogram.
__device__ __forceinline__ void store_score(float total, int w, int visible, int64_t out_row,
                                            uint16_t* __restrict__ keys_out, uint32_t* hist) {
  if (w < visible) {
    const uint16_t key = score_key(uint16_t(__float_as_uint(round_bf16(total)) >> 16));
    keys_out[out_row + w] = key;
    atomicAdd(&hist[key >> 8], 1u);
  }
}

// ---- Scan kernel ------------------------------------------------------------------------

constexpr int kScoreThreads = 256;
constexpr int kKeysPerWarp = 32;
constexpr int kKeysPerCta = kScoreThreads / 32 * kKeysPerWarp;  // 256

constexpr int kStages = 2;  // cp.async ring: one block computed while the next one loads

struct ScoreSmem {
  __nv_bfloat16 q[kIndexHeads * kRowS];
  __nv_bfloat16 k[kStages][kKeysPerCta * kRowS];  // per warp 32 key rows of each stage
  float w[kIndexHeads];
  uint32_t hist[256];
};

// The warp's 32 keys from wk0 → its rows of `kw` (cp.async; the caller commits); keys past
// `visible` become zeros.
__device__ __forceinline__ void load_warp_keys(const __nv_bfloat16* kbase0, int visible, int wk0,
                                               __nv_bfloat16* kw, int lane) {
  const __nv_bfloat16* kbase = kbase0 + int64_t(wk0) * kIndexDim;
#pragma unroll
  for (int i = lane; i < kKeysPerWarp * 16; i += 32) {
    const int key = i >> 4, c = i & 15;
    if (wk0 + key < visible)
      cp_async16(kw + key * kRowS + c * 8, kbase + key * kIndexDim + c * 8);
    else
      *reinterpret_cast<uint4*>(kw + key * kRowS + c * 8) = make_uint4(0, 0, 0, 0);
  }
}

// Lane's ldmatrix_x4 row address of q's B fragments (16-head tile np, 16-K step at k0) in the
// smem q tile (rows of kRowS bf16).
__device__ __forceinline__ const __nv_bfloat16* q_frag_addr(const __nv_bfloat16* q, int np, int k0, int lane) {
  return q + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * kRowS + k0 + ((lane >> 3) & 1) * 8;
}

// Grid (CTAs per row, rows); CTA x of row r scores blocks x, x + gridDim.x, ... of 256 keys
// with kStages − 1 blocks in flight (cp.async ring, one commit group per block). A warp reads
// only its own key rows (and the shared q), so after the first block (q) the warps run
// decoupled: a warp barrier per block, no CTA barrier.
//
// kQRegs: each warp keeps q's MMA B fragments (4 registers per 16-head tile and 16-K step, 128
// for 64 heads) in registers for the whole call instead of reading them from shared memory with
// ldmatrix for every block: q is 2/3 of the scan's shared-memory reads (every warp reads all of
// q per block, 16 KB, beside its own 8 KB of keys). Same MMAs on the same fragments in the same
// order: the same bits either way (214 registers with kQRegs, no spills; one CTA an SM either way).
template <bool kQRegs>
__global__ void __launch_bounds__(kScoreThreads, 1)
    score_kernel(const __grid_constant__ IndexerArgs a, uint16_t* __restrict__ keys_out,
                 uint32_t* __restrict__ hist_out) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  ScoreSmem& sm = *reinterpret_cast<ScoreSmem*>(smem_raw);
  pdl_wait();  // q, weights and keys come from earlier work
  pdl_trigger();
  const int r = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int visible = row_visible(a, r);
  const int blocks = (visible + kKeysPerCta - 1) / kKeysPerCta;
  uint32_t* hist_slice = hist_out + (int64_t(r) * gridDim.x + blockIdx.x) * 256;
  if (int(blockIdx.x) >= blocks) {  // no keys of this row: an empty slice
    hist_slice[tid] = 0;
    return;
  }
  const int HI = a.heads, head_pairs = (HI + 15) >> 4;  // 16-head MMA tiles that run
  const int64_t q_off = int64_t(r) * HI * kIndexDim;
  for (int i = tid; i < head_pairs * 16 * kIndexDim / 8; i += kScoreThreads) {
    const int h = i / (kIndexDim / 8), c = i % (kIndexDim / 8);
    __nv_bfloat16* dst = sm.q + h * kRowS + c * 8;
    if (h >= HI) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    } else if (a.q_f32 == nullptr) {
      cp_async16(dst, a.q + q_off + h * kIndexDim + c * 8);  // committed with the first keys
    } else {
      const float4* src = reinterpret_cast<const float4*>(a.q_f32 + q_off + h * kIndexDim + c * 8);
      const float4 x = src[0], y = src[1];
      *reinterpret_cast<uint4*>(dst) = make_uint4(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w),
                                                  pack_bf16x2(y.x, y.y), pack_bf16x2(y.z, y.w));
    }
  }
  if (tid < HI) sm.w[tid] = a.weights[int64_t(r) * HI + tid];
  sm.hist[tid] = 0;
  const __nv_bfloat16* kbase = row_keys(a, r);
  const int step = int(gridDim.x);
  int b_issue = blockIdx.x;
  if constexpr (kQRegs) cp_async_commit();  // q's own group: waited for before the first keys
  for (int s = 0; s < kStages - 1; ++s, b_issue += step) {
    if (b_issue < blocks)
      load_warp_keys(kbase, visible, b_issue * kKeysPerCta + warp * kKeysPerWarp,
                     sm.k[s] + warp * kKeysPerWarp * kRowS, lane);
    cp_async_commit();
  }
  // q's B fragments of 16-head tile np < head_pairs, 16-K step ks: qf[ks][np] (kQRegs only).
  uint32_t qf[kIndexDim / 16][kQRegs ? 4 : 1][4];
  if constexpr (kQRegs) {
    cp_async_wait<kStages - 1>();  // q (the oldest group) copied by this thread
    __syncthreads();               // q, w and the zeroed histogram visible to every warp
#pragma unroll
    for (int ks = 0; ks < kIndexDim / 16; ++ks)
#pragma unroll
      for (int np = 0; np < 4; ++np)
        if (np < head_pairs) ldmatrix_x4(qf[ks][np], q_frag_addr(sm.q, np, ks * 16, lane));
  }
  const int64_t out_row = int64_t(r) * indexer_score_stride(a.max_visible);
  int stage = 0, stage_issue = kStages - 1;
  for (int b = blockIdx.x, it = 0; b < blocks; b += step, b_issue += step, ++it) {
    if (b_issue < blocks)  // into the stage the warp computed last iteration (its own rows)
      load_warp_keys(kbase, visible, b_issue * kKeysPerCta + warp * kKeysPerWarp,
                     sm.k[stage_issue] + warp * kKeysPerWarp * kRowS, lane);
    cp_async_commit();
    stage_issue = stage_issue + 1 == kStages ? 0 : stage_issue + 1;
    cp_async_wait<kStages - 1>();  // block b (and q) copied by this thread
    if (!kQRegs && it == 0)
      __syncthreads();  // q (first pass) and every lane's key rows of this stage are visible
    else
      __syncwarp();     // the warp's key rows of this stage are visible to all its lanes
    const int wk0 = b * kKeysPerCta + warp * kKeysPerWarp;
    const __nv_bfloat16* kw = sm.k[stage] + warp * kKeysPerWarp * kRowS;
    stage = stage + 1 == kStages ? 0 : stage + 1;
    float acc[2][8][4] = {};
#pragma unroll
    for (int k0 = 0; k0 < kIndexDim; k0 += 16) {
      uint32_t af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldmatrix_x4(af[mt], kw + (mt * 16 + (lane & 15)) * kRowS + k0 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (np >= head_pairs) break;
        uint32_t bf[4];
        if constexpr (kQRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) bf[i] = qf[k0 / 16][np][i];
        } else {
          ldmatrix_x4(bf, q_frag_addr(sm.q, np, k0, lane));
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16(acc[mt][2 * np], af[mt], bf[0], bf[1]);
          mma_bf16(acc[mt][2 * np + 1], af[mt], bf[2], bf[3]);
        }
      }
    }
    // Head sum in registers: lane (q = lane/4, j = lane%4) holds heads 8nt + 2j + {0,1} of keys
    // q, q+8 (mt 0) and 16+q, 24+q (mt 1); it sums its 16 terms per key in (nt, head) order,
    // then the quad adds its 4 partials (xor 1, then xor 2), and lane j keeps key slot j.
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // key slots mt·2 + hi
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      if (nt * 8 >= HI) break;
      const int h = nt * 8 + (lane & 3) * 2;
      const uint32_t w2 = pack_bf16x2(sm.w[h], sm.w[h + 1]);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          float t0, t1;
          head_terms(acc[mt][nt][hi * 2], acc[mt][nt][hi * 2 + 1], w2, t0, t1);
          part[mt * 2 + hi] += t0;
          part[mt * 2 + hi] += t1;
        }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      part[k] += __shfl_xor_sync(~0u, part[k], 1);
      part[k] += __shfl_xor_sync(~0u, part[k], 2);
    }
    const int j = lane & 3;
    const float total = j == 0 ? part[0] : j == 1 ? part[1] : j == 2 ? part[2] : part[3];
    store_score(total, wk0 + (j >> 1) * 16 + (lane >> 2) + (j & 1) * 8, visible, out_row, keys_out, sm.hist);
    __syncwarp();  // kw is read: a later iteration may prefetch into this stage
  }
  cp_async_wait_all();
  __syncthreads();
  hist_slice[tid] = sm.hist[tid];
}

// Score CTAs per row (one CTA per SM, ≈ 155 KB smem): floor(SMs / rows), at most one per
// 256-key block; 0 when no row has a visible key (no scan). rows · slices ≤ max(rows, SMs).
int scan_slices(int rows, int max_visible) {
  const int blocks = (max_visible + kKeysPerCta - 1) / kKeysPerCta;
  return std::min(blocks, std::max(1, device_sm_count() / rows));
}

template <bool kQRegs>
void launch_scan_as(const IndexerArgs& a, uint16_t* keys, uint32_t* hist, int slices, cudaStream_t stream) {
  static std::once_flag attr_set[kMaxDevices];  // cudaFuncSetAttribute is per device
  call_once_per_device(attr_set, [] {
    CUDA_CHECK(cudaFuncSetAttribute(score_kernel<kQRegs>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(sizeof(ScoreSmem))));
  });
  launch_pdl(score_kernel<kQRegs>, dim3(unsigned(slices), unsigned(a.rows)), dim3(kScoreThreads),
             sizeof(ScoreSmem), stream, a, keys, hist);
}

// The scan holds all of q in registers; DSV4_INDEXER_QREGS=0 reads it from shared memory per
// block instead (the previous form, for A/B runs).
void launch_scan(const IndexerArgs& a, uint16_t* keys, uint32_t* hist, int slices, cudaStream_t stream) {
  static const bool q_regs = env_switch_on("DSV4_INDEXER_QREGS");
  if (q_regs) launch_scan_as<true>(a, keys, hist, slices, stream);
  else launch_scan_as<false>(a, keys, hist, slices, stream);
}

void indexer_topk_impl(const IndexerArgs& a, void* workspace, long long* probe, cudaStream_t stream) {
  if (a.rows == 0) return;
  DSV4_CHECK(a.rows <= 65535, "too many indexer rows: ", a.rows);
  DSV4_CHECK(a.heads >= 8 && a.heads <= kIndexHeads && a.heads % 8 == 0, "indexer: ", a.heads,
             " heads (8..64, multiple of 8)");
  DSV4_CHECK(a.k >= 1 && a.k <= kIndexTopk, "indexer: top-", a.k, " (1..", kIndexTopk, ")");
  DSV4_CHECK((a.q != nullptr) != (a.q_f32 != nullptr), "indexer: exactly one of q / q_f32");
  DSV4_CHECK(a.visible != nullptr || (a.pos != nullptr && a.ratio > 0), "indexer: no visible counts");
  DSV4_CHECK(a.caches != nullptr || a.keys != nullptr, "indexer: no keys");
  uint16_t* keys = static_cast<uint16_t*>(workspace);
  uint32_t* hist = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(workspace) +
                                               keys_bytes(a.rows, a.max_visible));
  const int slices = a.max_visible > 0 ? scan_slices(a.rows, a.max_visible) : 0;
  if (slices > 0) launch_scan(a, keys, hist, slices, stream);
  if (a.scores_only) return;
  launch_indexer_select(a, keys, hist, slices, probe, stream);
}

}  // namespace

size_t indexer_workspace_bytes(int rows, int max_visible) {
  return keys_bytes(rows, max_visible) + size_t(rows) * size_t(std::max(scan_slices(rows, max_visible), 0)) * 256 *
                                             sizeof(uint32_t);
}

void indexer_topk(const IndexerArgs& a, void* workspace, cudaStream_t stream) {
  indexer_topk_impl(a, workspace, nullptr, stream);
}

void indexer_topk_probe(const IndexerArgs& a, void* workspace, long long* probe, cudaStream_t stream) {
  DSV4_CHECK(probe != nullptr && !a.scores_only, "indexer_topk_probe: no probe buffer or no selection");
  indexer_topk_impl(a, workspace, probe, stream);
}

}  // namespace dsv4::gpu::sm90
