// Grouped W4A8 MoE on sm_90a tensor cores (spec §4.0 Lin4/Lin8, §4.8), device side.
//
// Design. Four launches per MoE layer, none needing a host sync:
//  0. group: blocks 0..T−1 Q8-quantize x (per 128, power-of-two scales) into the "MMA layout"
//     below; block T histograms the (token, k) slots per expert, scans offsets, scatters each
//     slot to a position p (positions are grouped by expert; the shared expert is expert E with
//     positions P..P+T−1, P = T·k) and cuts every expert's positions into chunks of ≤ 8 tokens
//     (≤ 32 for large calls: Params::chunk_tokens, the wgmma n; both give the same bits).
//  1. gate+up: a persistent grid (one CTA per SM, GemmShape warps = warpgroups of 4); one
//     warpgroup item = (chunk, 4 consecutive row tiles), one tile per warp: 16 w1 rows and 16
//     w3 rows × 8 (32) tokens, streamed over K through cp.async rings (4 KB of weights per warp and
//     stage in the warp's own shared memory, the chunk's activations once per warpgroup; only
//     the live tokens are copied). Per 32-K block: FP4 → e4m3 in registers (the wgmma A
//     operand, 16 rows per warp), one `wgmma m64n8k32 e4m3` (n32) per m-tile into a fresh fp32
//     partial with the activations as the shared-memory B operand, then acc += (partial·s_x)·s_w
//     in fp32, K order — cpu::Fp4Linear's order (the partial of one 32-K block is the tensor
//     core's sum of the same 32 products).
//     The epilogue rounds g, u to bf16, clamps, SwiGLU, multiplies by the routing weight,
//     rounds to bf16, and the last of the items that finish one 128-wide I block (atomic
//     counter) Q8-quantizes it.
//  2. down: same mainloop over w2, warp tile = 32 D-rows, output bf16(acc) per position.
//  3. combine: per token, Σ over its experts in ascending id (fp32) + shared, one bf16 round.
// Phases 0 and 3 (the routing side) live in sm90_moe_group.cuh, the gemm kernel of phases 1 and 2
// (its items, ring and epilogues) in sm90_moe_gemm.cuh; this file has the shared definitions and
// the math of one ring stage.
// Weights come in the stage-tile layout (moe_grouped.h): a warp's stage is contiguous 2 KB /
// 4 KB blocks, copied straight into its ring slot. Under programmatic dependent launch the
// gemm kernels start their first item's weight copies before the previous launch completes.
// The shared expert (FP8 weights, 128×128 scales) runs in phases 1/2 as extra chunks, each
// listed twice (two halves of the output rows) with half-height warp tiles (8 w1 + 8 w3 rows
// packed in one m-tile; 16 w2 rows), so its items stream the same 64 / 32 KB per warp as a
// routed item and a batch-1 layer has no long tail. Per 128-K block 4 fresh wgmma partials,
// summed in fp32 in K order, then acc += partial·(s_x·s_w) — cpu::Fp8Linear's order.
//
// FP4→FP8: the nibble's 3 magnitude bits go straight into e4m3 bits [4:2] and the sign to bit 7,
// which is the E2M1 value × 2⁻⁶ exactly; 2⁶ is folded into s_x (exact, powers of two).
// MMA layout of Q8 activations (ours): per 32-K block kb, the 16 even-K codes then the 16 odd-K
// codes: byte 32·kb + (k%2)·16 + (k%32)/2 for element k. A warpgroup's 8 token rows of one
// 256-K stage sit in shared memory as 16 core matrices of 8 tokens × 16 bytes (granule q of
// token n at q·128 + n·16): the K-major, unswizzled wgmma B layout whose 32 "k" of block kb are
// the evens then the odds of K 32kb..32kb+31. The A fragment of lane (g, t) built from the 4
// FP4 bytes 4t..4t+3 of the weight row's 16-byte block (K 8t..8t+7) matches it: low nibbles
// (K 8t, 8t+2, 8t+4, 8t+6) → a0/a1 "cols 4t..4t+3", high nibbles → a2/a3 "cols 16+4t..". The
// sum inside one MMA is over the same 32 products either way.
#pragma once

#include <cstdint>

#include "gpu/device_math.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_wgmma_common.cuh"  // shared-memory addresses, cp.async, wgmma fences, mbarriers, bulk copies
#include "gpu/row_ops.cuh"

namespace dsv4::gpu::moe4 {

constexpr int kTok = 8;        // tokens per chunk (MMA n) of the decode-sized calls
constexpr int kTokWide = 32;   // tokens per chunk of large calls (Params::chunk_tokens)
constexpr int kMaxE = 1023;    // experts (the group block scans E+1 ≤ 1024 entries)
constexpr int kMaxTopK = 16;
// Ring stage (256 K). Per warp: weights 4 KB (FP4 32 rows × 128 B, FP8 16 rows × 256 B), FP4
// weight scales 32 rows × 8 B. Per warpgroup: activations 8 tokens × 256 B (wgmma B layout),
// activation scales 8 tokens × 2 floats.
constexpr int kWarpStageW = 0, kWarpStageWs = 4096, kWarpStageBytes = 4352;
// kN tokens per chunk (8 or 32): activations kN × 256 B, then their scales kN × 8 B.
__host__ __device__ constexpr int group_stage_xs(int kN) { return kN * 256; }
__host__ __device__ constexpr int group_stage_bytes(int kN) { return kN * 264; }
// CTA shapes of phases 1/2 (one CTA per SM): warps (a multiple of 4) × ring depth.
struct GemmShape {
  int warps, stages;
  int tokens = kTok;  // chunk tokens (the wgmma n)
  constexpr int groups() const { return warps / 4; }
  constexpr int smem() const { return stages * (groups() * group_stage_bytes(tokens) + warps * kWarpStageBytes); }
};
constexpr GemmShape kShape8x4{8, 4};    // 156,160 B
constexpr GemmShape kShape12x3{12, 3};  // 175,680 B
constexpr GemmShape kShape16x2{16, 2};  // 156,160 B: the same bytes in flight, twice the warps
constexpr GemmShape kShape8x4Wide{8, 4, kTokWide};  // 206,848 B: chunks of 32 tokens (large calls)
// Benchmark diagnostics of the gemm kernels (wrong results): none, weights without the math,
// math without the weight copies, neither (the launches, activation copies, ring barriers and
// epilogues alone).
constexpr int kDiagNone = 0, kDiagLoadOnly = 1, kDiagMathOnly = 2, kDiagSkeleton = 3;
__host__ __device__ constexpr bool diag_copies_weights(int d) { return d == kDiagNone || d == kDiagLoadOnly; }
__host__ __device__ constexpr bool diag_runs_math(int d) { return d == kDiagNone || d == kDiagMathOnly; }

// One expert's matrices in the checkpoint layout. Routed (FP4): w1/w3 [I, D/2], w2 [D, I/2]
// packed low-nibble-first, scales [out, in/32] E8M0. Shared (FP8): w [out, in] e4m3, scales
// [ceil(out/128), ceil(in/128)] E8M0.
struct ExpertPtrs {
  const uint8_t *w1, *s1, *w3, *s3, *w2, *s2;
};

struct Chunk {
  int expert;  // 0..E−1 routed; E, E+1 = shared expert, first / second half of the rows
  int pos;     // first position
  int n;       // 1..Params::chunk_tokens tokens
};

struct Params {
  int T, k, E, D, I;
  bool has_shared;
  float limit;                // SwiGLU clamp (0 = none)
  const float* x;             // [T, D] bf16 values
  const int32_t* ids;         // [T, k]
  const float* weights;       // [T, k]
  const ExpertPtrs* experts;  // [E] (device)
  ExpertPtrs shared;
  // workspace (sized for T_max)
  uint8_t* xq;                // [T, D] MMA layout
  float* xs;                  // [T, D/128]
  int* pos_token;             // [P+T]
  float* pos_weight;          // [P+T]
  int* slot_pos;              // [T·k]
  Chunk* chunks;              // [max chunks]
  int* num_chunks;            // [1]
  float* h;                   // [P+T, I] SwiGLU output (bf16 values)
  uint8_t* hq;                // [P+T, I] MMA layout
  float* hs;                  // [P+T, I/128]
  unsigned* arrive;           // [max chunks · I/128], zero between calls
  float* y;                   // [P+T, D] expert outputs (bf16 values)
  float* out;                 // [T, D]
  int chunk_tokens;           // kTok, kTokWide (GemmShape::tokens) or kWideN (sm90_moe_wide.cuh)
  // Stage records of the wide kernels' FP4 path (sm90_moe_group.cuh stage_record): x's [T, D/256, 4],
  // h's [P+T, I/256, 4].
  float* xr;
  float* hr;
  // One-token launch's counters (moe_one_token_kernel), zero between calls: h's readiness per
  // chunk key [kOneTokenRows], then y's arrived rows per 128-row block [D/128], then the blocks
  // combined [1].
  unsigned* sync1;
  // Benchmarks (moe_grouped_set_probe): the one-token launch's globaltimer stamps, [warpgroup]
  // [kProbeEvents] ns (nullptr: none).
  unsigned long long* probe;
};
constexpr int kProbeEvents = 16;
constexpr int kOneTokenRows = 2 + kTok;  // offset of the row counts in Params::sync1 (after the chunk keys)

// Chunks of the shared expert for T tokens: ⌈T/ct⌉ chunks of ct = chunk_tokens, each listed twice
// (two row halves).
__host__ __device__ __forceinline__ int shared_chunks(int T, int ct) { return 2 * ((T + ct - 1) / ct); }

__device__ __forceinline__ int mma_layout_offset(int k) { return (k & ~31) | ((k & 1) << 4) | ((k & 31) >> 1); }

// The warpgroup-MMA linears' device helpers (sm90_wgmma_common.cuh). The A registers of a wgmma
// are computed before wg_fence() and stay untouched until wg_wait0 (ptxas tracks them); the B
// tile comes from shared memory. fence_proxy_async makes this thread's completed cp.async writes
// visible to the async proxy (wgmma's shared-memory reads).
using mma::detail::wgmma::bulk_copy;
using mma::detail::wgmma::cp_async16;
using mma::detail::wgmma::fence_proxy_async;
using mma::detail::wgmma::mbar_expect_tx;
using mma::detail::wgmma::mbar_init;
using mma::detail::wgmma::mbar_init_fence;
using mma::detail::wgmma::mbar_wait;
using mma::detail::wgmma::smem_addr;
using mma::detail::wgmma::sw128_desc;
using mma::detail::wgmma::wg_commit;
using mma::detail::wgmma::wg_fence;
using mma::detail::wgmma::wg_wait0;

__device__ __forceinline__ void cp8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Barrier of one warpgroup (128 threads), id 1..15.
__device__ __forceinline__ void group_sync(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
// Shared-memory descriptor of a K-major, unswizzled B tile of kN rows × 32 bytes stored as
// granule q (16 B of K) of row n at q·kN·16 + n·16: core matrices (8 rows × 16 B, rows 16 B
// apart) kN·16 B apart along K (leading byte offset) and 128 B apart along N (stride byte
// offset). For kN = 8 both are 128.
template <int kN = kTok>
__device__ __forceinline__ uint64_t b_desc(uint32_t saddr) {
  return uint64_t((saddr & 0x3ffffu) >> 4) | (uint64_t((kN * 16) >> 4) << 16) | (uint64_t(128 >> 4) << 32);
}
// d = A(64×32 e4m3: this warp's rows 16w..16w+15 in a, the mma.m16n8k32 A fragment) ·
// B(32×8 e4m3 at desc), fp32, fresh (scale-d = 0: no C).
__device__ __forceinline__ void wgmma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
// The same over 32 columns (B = 32 × 32 e4m3): d[4j..4j+3] is the m64n8 fragment of columns 8j..8j+7.
__device__ __forceinline__ void wgmma_e4m3(float (&d)[16], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]),
        "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

// 4 packed FP4 bytes (8 nibbles) → e4m3 codes of value·2⁻⁶: low nibbles, high nibbles.
__device__ __forceinline__ uint32_t fp4_lo(uint32_t w) {
  return ((w << 2) & 0x1c1c1c1cu) | ((w << 4) & 0x80808080u);
}
__device__ __forceinline__ uint32_t fp4_hi(uint32_t w) { return ((w >> 2) & 0x1c1c1c1cu) | (w & 0x80808080u); }
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
// a/b for powers of two a, b (normal result): an exponent subtraction.
__device__ __forceinline__ float pow2_ratio(float a, float b) {
  return __int_as_float(__float_as_int(a) - __float_as_int(b) + 0x3f800000);
}
__device__ __forceinline__ float e8m0f(uint32_t b) { return __uint_as_float(b ? b << 23 : 0x00400000u); }


// Q8 of 128 values (4 per lane) into codes (MMA layout) + scale; k0 = first K index.
__device__ __forceinline__ void q8_block_store(float4 v, int lane, int k0, uint8_t* codes_row, float* scale) {
  const float vals[4] = {v.x, v.y, v.z, v.w};
  uint8_t codes[4];
  const float sc = q8_block_codes_warp(vals, codes);
#pragma unroll
  for (int i = 0; i < 4; ++i) codes_row[mma_layout_offset(k0 + lane * 4 + i)] = codes[i];
  if (lane == 0) *scale = sc;
}
// q8_block_store's codes and scale into a whole-K activation area of stages (moe_item's kQ8Down):
// value k0 + 4·lane + i of token slot `slot` goes where moe_item's copies put the same code of
// the global row (its MMA-layout offset o: stage o / 256, granule (o % 256) / 16, byte o % 16 of
// the slot's 16 bytes), the scale where they put the stage's block scales (block (k0 / 128) % 2).
template <int kN>
__device__ __forceinline__ void q8_block_to_stage(float4 v, int lane, int k0, uint8_t* area, int slot) {
  const float vals[4] = {v.x, v.y, v.z, v.w};
  uint8_t codes[4];
  const float sc = q8_block_codes_warp(vals, codes);
  uint8_t* stage = area + (k0 / 256) * group_stage_bytes(kN);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int o = mma_layout_offset(k0 + lane * 4 + i) % 256;
    stage[(o / 16) * (kN * 16) + slot * 16 + o % 16] = codes[i];
  }
  if (lane == 0) reinterpret_cast<float*>(stage + group_stage_xs(kN) + slot * 8)[(k0 / 128) % 2] = sc;
}
// Counters between warps of different CTAs without a full fence (the CUTLASS semaphore pattern):
// the warp's lanes meet at __syncwarp, then lane 0 adds with release (its lanes' earlier stores
// become visible GPU-wide first) or acquire-release (and the earlier adds' stores become visible
// to it; a __syncwarp after passes that on to its lanes).
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned* a, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(a), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void red_add_release_gpu(unsigned* a, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(a), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* a) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(a) : "memory");
  return v;
}
// One h value from the fp32 gate and up sums (spec §4.8): both rounded to bf16, clamped (limit > 0),
// SwiGLU, times the routing weight w (kWeighted: routed experts), rounded to bf16.
template <bool kWeighted>
__device__ __forceinline__ float swiglu_h(float g, float u, float limit, float w) {
  float gv = round_bf16(g), uv = round_bf16(u);
  if (limit > 0) {
    uv = fminf(fmaxf(uv, -limit), limit);
    gv = fminf(gv, limit);
  }
  float hv = (gv / (1.0f + dexpf(-gv))) * uv;
  if (kWeighted) hv = w * hv;
  return round_bf16(hv);
}

// Weight source of one warp item in the stage-tile layout (moe_grouped.h): stage s of the
// item's A rows is the contiguous block wA + s·kBlk, of its B rows (gate+up: w3) wB + s·kBlk;
// FP4 row scales likewise at sA/sB + s·kSBlk. kBlk = 2 KB (gate+up halves) or 4 KB (down).
struct ItemWeights {
  const uint8_t *wA, *wB, *sA, *sB;
};
template <bool kUp, bool kFp8>
__device__ __forceinline__ int item_row0(const Params& p, int expert, int tile) {
  // First output row of the item (FP8: tiles of the two halves follow each other).
  return kFp8 ? ((expert - p.E) * (kUp ? p.I / 16 : p.D / 32) + tile) * (kUp ? 8 : 16) : (kUp ? tile * 16 : tile * 32);
}
template <bool kUp, bool kFp8>
__device__ __forceinline__ ItemWeights item_weights(const Params& p, const ExpertPtrs& ex, int row0) {
  constexpr int kBlk = kUp ? 2048 : 4096, kSBlk = kUp ? 128 : 256;
  const int K = kUp ? p.D : p.I, nst = K / 256;
  const int ti = row0 / (kFp8 ? (kUp ? 8 : 16) : (kUp ? 16 : 32));  // tile of the stage-tile layout
  ItemWeights w;
  w.wA = (kUp ? ex.w1 : ex.w2) + size_t(ti) * nst * kBlk;
  w.wB = kUp ? ex.w3 + size_t(ti) * nst * kBlk : w.wA;
  if constexpr (kFp8) {  // block-row scales (read per 128-K block by the mainloop)
    const int rowblk = row0 / 128 * (K / 128);
    w.sA = (kUp ? ex.s1 : ex.s2) + rowblk;
    w.sB = kUp ? ex.s3 + rowblk : w.sA;
  } else {
    w.sA = (kUp ? ex.s1 : ex.s2) + size_t(ti) * nst * kSBlk;
    w.sB = kUp ? ex.s3 + size_t(ti) * nst * kSBlk : w.sA;
  }
  return w;
}
// cp.async of stage s's 4 KB of weights (+ FP4 row scales) into ring slot st: consecutive
// lanes copy consecutive 16-byte granules of the contiguous blocks (already swizzled).
template <bool kUp, bool kFp8>
__device__ __forceinline__ void issue_weights(const ItemWeights& w, int s, uint8_t* st, int lane) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int q = lane + 32 * i;  // granule of the stage (0..255)
    const uint8_t* src = kUp ? (i < 4 ? w.wA + s * 2048 + q * 16 : w.wB + s * 2048 + (q - 128) * 16)
                             : w.wA + s * 4096 + q * 16;
    cp_async16(st + kWarpStageW + q * 16, src);
  }
  if constexpr (!kFp8) {
    if (lane < 16)
      cp_async16(st + kWarpStageWs + lane * 16, kUp ? (lane < 8 ? w.sA + s * 128 + lane * 16 : w.sB + s * 128 + (lane - 8) * 16)
                                          : w.sA + s * 256 + lane * 16);
  }
}

// Multiplies column block j's accumulators of token slots 8j + 2t by a, of 8j + 2t + 1 by b.
template <int kJ>
__device__ __forceinline__ void scale_cols(float (&acc)[2][4 * kJ], int j, float a, float b) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    acc[mt][4 * j + 0] *= a;
    acc[mt][4 * j + 2] *= a;
    acc[mt][4 * j + 1] *= b;
    acc[mt][4 * j + 3] *= b;
  }
}

// The math of one 256-K stage of a warp's item (moe_item's layouts): wslot the warp's ring slot
// (weights at kWarpStageW, FP4 row scales at kWarpStageWs), gs the warpgroup's activation stage
// (kN token slots × 256 B in the wgmma B layout, then their scales, 2 floats per slot), sA/sB
// the FP8 block-row scales and s the stage's index in the item (FP8 only). Accumulates into acc
// (FP4: in units of S = 2⁶·s_x of the current 128-K block, cur[j][c] = that s_x).
template <bool kFp8, int kBq, int kN>
__device__ __forceinline__ void stage_math(const uint8_t* wslot, const uint8_t* gs, const uint8_t* sA,
                                           const uint8_t* sB, int s, int lane, float (&acc)[2][4 * (kN / 8)],
                                           float (&cur)[kN / 8][2]) {
  constexpr int kJ = kN / 8;
  constexpr int kXs = group_stage_xs(kN);
  const int g = lane >> 2, t = lane & 3;
  const uint8_t* W = wslot + kWarpStageW;
  // + 2·kN per 32-K block (two 16-byte granule columns of kN rows)
  const uint64_t desc = b_desc<kN>(smem_addr(gs));
  float4 sx4[kJ];  // token slots 8j + 2t, 8j + 2t + 1: their two 128-K blocks' scales
#pragma unroll
  for (int j = 0; j < kJ; ++j) sx4[j] = *reinterpret_cast<const float4*>(gs + kXs + (8 * j + 2 * t) * 8);
  if constexpr (kFp8) {
    // kBq == 8: both 128-K blocks' 4 MMAs in one batch (one wgmma round trip per stage).
    constexpr int kHb = kBq >= 8 ? 2 : 1;
#pragma unroll
    for (int hb0 = 0; hb0 < 2; hb0 += kHb) {
      uint32_t a[kHb][4][4];
#pragma unroll
      for (int h = 0; h < kHb; ++h)
#pragma unroll
        for (int kq = 0; kq < 4; ++kq) {
          const int kb = 4 * (hb0 + h) + kq;
          const int gofs = (((2 * kb + (t >> 1)) ^ g) << 4) + (t & 1) * 8;
          const uint2 v0 = *reinterpret_cast<const uint2*>(W + g * 256 + gofs);
          const uint2 v1 = *reinterpret_cast<const uint2*>(W + (g + 8) * 256 + gofs);
          a[h][kq][0] = prmt(v0.x, v0.y, 0x6420);
          a[h][kq][1] = prmt(v1.x, v1.y, 0x6420);
          a[h][kq][2] = prmt(v0.x, v0.y, 0x7531);
          a[h][kq][3] = prmt(v1.x, v1.y, 0x7531);
        }
      float d[kHb][4][4 * kJ];
      wg_fence();
#pragma unroll
      for (int h = 0; h < kHb; ++h)
#pragma unroll
        for (int kq = 0; kq < 4; ++kq) wgmma_e4m3(d[h][kq], a[h][kq], desc + (4 * (hb0 + h) + kq) * 2 * kN);
      wg_commit();
      wg_wait0();
#pragma unroll
      for (int h = 0; h < kHb; ++h) {
        const int hb = hb0 + h;
        const float swA = e8m0f(__ldg(sA + 2 * s + hb)), swB = e8m0f(__ldg(sB + 2 * s + hb));
#pragma unroll
        for (int j = 0; j < kJ; ++j) {
          const float xa = hb ? sx4[j].y : sx4[j].x, xb = hb ? sx4[j].w : sx4[j].z;
          float ds[4];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            ds[i] = ((d[h][0][4 * j + i] + d[h][1][4 * j + i]) + d[h][2][4 * j + i]) + d[h][3][4 * j + i];
          acc[0][4 * j + 0] = fmaf(ds[0], xa * swA, acc[0][4 * j + 0]);
          acc[0][4 * j + 1] = fmaf(ds[1], xb * swA, acc[0][4 * j + 1]);
          acc[0][4 * j + 2] = fmaf(ds[2], xa * swB, acc[0][4 * j + 2]);
          acc[0][4 * j + 3] = fmaf(ds[3], xb * swB, acc[0][4 * j + 3]);
        }
      }
    }
  } else {
    uint2 swr[4];
#pragma unroll
    for (int m = 0; m < 4; ++m)
      swr[m] = *reinterpret_cast<const uint2*>(wslot + kWarpStageWs + (g + 8 * m) * 8);
    // The stage's 8 32-K blocks b = 4·hb + kq (hb: its two 128-K activation blocks) in batches of
    // kBq blocks × 2 m-tiles; a batch of 8 spans both halves (one wgmma round trip per stage).
    // The accumulator sees the same operations in the same order for every kBq: per half, the
    // rescale to its activation scale, then blocks 4hb .. 4hb+3.
#pragma unroll
    for (int b0 = 0; b0 < 8; b0 += kBq) {
      uint32_t a[kBq][2][4];
#pragma unroll
      for (int q = 0; q < kBq; ++q)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const int gofs = (((b0 + q) ^ g) << 4) + t * 4;
          const uint32_t w0 = *reinterpret_cast<const uint32_t*>(W + (mt * 16 + g) * 128 + gofs);
          const uint32_t w1 = *reinterpret_cast<const uint32_t*>(W + (mt * 16 + g + 8) * 128 + gofs);
          a[q][mt][0] = fp4_lo(w0);
          a[q][mt][1] = fp4_lo(w1);
          a[q][mt][2] = fp4_hi(w0);
          a[q][mt][3] = fp4_hi(w1);
        }
      float d[kBq][2][4 * kJ];  // d = partial·2⁻⁶ of block b0+q, m-tile mt
      wg_fence();
#pragma unroll
      for (int q = 0; q < kBq; ++q)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) wgmma_e4m3(d[q][mt], a[q][mt], desc + (b0 + q) * 2 * kN);
      wg_commit();
      wg_wait0();
#pragma unroll
      for (int q = 0; q < kBq; ++q) {
        const int b = b0 + q, hb = b >> 2, kq = b & 3;
        if (kq == 0) {
#pragma unroll
          for (int j = 0; j < kJ; ++j) {  // new 128-K activation block: u ← u·S_old/S_new (exact powers of two)
            const float na = hb ? sx4[j].y : sx4[j].x, nb = hb ? sx4[j].w : sx4[j].z;
            scale_cols<kJ>(acc, j, pow2_ratio(cur[j][0], na), pow2_ratio(cur[j][1], nb));
            cur[j][0] = na;
            cur[j][1] = nb;
          }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          // E8M0 byte kb → fp32 2^(b−127) (prmt the byte to bits 24..31, shift right by 1;
          // byte 0 would give 0 instead of 2^−127: absent from real checkpoints).
          const uint2 s0 = swr[2 * mt], s1 = swr[2 * mt + 1];
          const uint32_t sel = 0x0444u | (uint32_t(kq) << 12);
          const float sg = __uint_as_float(prmt(hb ? s0.y : s0.x, 0u, sel) >> 1);
          const float sg8 = __uint_as_float(prmt(hb ? s1.y : s1.x, 0u, sel) >> 1);
          // acc in units of S = 2⁶·s_x: S·fl(u + d·s_w) == fl(acc + (partial·s_x)·s_w), all
          // scales powers of two (normal range): cpu::Fp4Linear's order.
#pragma unroll
          for (int j = 0; j < kJ; ++j) {
            acc[mt][4 * j + 0] = fmaf(d[q][mt][4 * j + 0], sg, acc[mt][4 * j + 0]);
            acc[mt][4 * j + 1] = fmaf(d[q][mt][4 * j + 1], sg, acc[mt][4 * j + 1]);
            acc[mt][4 * j + 2] = fmaf(d[q][mt][4 * j + 2], sg8, acc[mt][4 * j + 2]);
            acc[mt][4 * j + 3] = fmaf(d[q][mt][4 * j + 3], sg8, acc[mt][4 * j + 3]);
          }
        }
      }
    }
  }
}

}  // namespace dsv4::gpu::moe4
