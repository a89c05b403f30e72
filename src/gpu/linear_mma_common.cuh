// Shared by the tensor-core linear kernels (linear_mma.cu: the register-fed decode tiles;
// linear_mma_staged.cu: the shared-memory-staged tiles for many rows; the sm90_* warpgroup-MMA
// forms) and their dispatch (linear_mma_dispatch.cu): launch arguments and the MMA / conversion
// primitives. Internal to those files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/linear_mma.h"

namespace dsv4::gpu::mma::detail {

constexpr int kWarps = 8;

// kFp8: lin8 (e4m3 weights × Q8 activations). kBf16: dense (bf16 weights × fp32 activations).
// kFp8AsBf16: dense arithmetic on e4m3 weights with E8M0 128×128 tile scales, the result of
// bf16(code·scale) weights (wo_a: half the bytes of the widened bf16 copy, the same bits).
enum class Wt { kFp8, kBf16, kFp8AsBf16 };

struct Args {
  const void* x;       // lin8: e4m3 [rows / x_row_div, in]; dense: fp32 [rows, x_stride]
  const float* xs;     // lin8: [rows / x_row_div, in / 128]
  int x_row_div;       // lin8
  int64_t x_stride;    // dense
  const void* w;       // [out, in]
  const uint8_t* ws;   // lin8, kFp8AsBf16: [ceil(out / 128), in / 128]
  int64_t rows, out, in;
  int64_t opg;         // output rows per group (out when not grouped)
  int64_t tiles_per_group;
  bool round;          // lin8 round_out / dense round_bf16
  float post_scale;    // dense
  float* y;            // [rows, out]
  // nseg > 0: several weights over the same x; seg[j] owns tiles [tile0, next tile0) of blockIdx.y
  // and replaces w / out / opg / y / round / post_scale for them.
  // kFp8AsBf16, optional: x's bf16 bits [rows, x_stride] and, per row and block of x16_flag_values
  // values, whether x is bf16-valued there (x16_ok [rows, ceil(x_stride / x16_flag_values)]);
  // fragments whose rows all are, over the group's values, take their activations from x16.
  const uint16_t* x16;
  const int32_t* x16_ok;
  int64_t x16_flag_values;
  bool prefetch;       // launched under programmatic dependent launch: prefetch weights before pdl_wait
  int nseg;
  struct Seg {
    const void* w;
    const uint8_t* ws;  // lin8
    int64_t out, tile0;
    float* y;
    bool round;
    float post_scale;
  } seg[kMaxDenseSegments];
};

// 16 bytes of weights, streaming (`.cs`: evict first in L1 and L2; a weight byte is read once a
// step): the read-only path as __ldg, without the 64-bit policy operand of `.L2::cache_hint`.
__device__ __forceinline__ uint4 ldg_weight(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.cs.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two e4m3 codes (low byte = lower k) → f16x2 (low half = lower k); exact.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Two e4m3 codes (low byte = lower k) → bf16x2 of their values (exact: 4 significant bits).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t v) {
  const uint32_t h = e4m3x2_to_f16x2(v);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return pack_bf16(f.x, f.y);
}

__device__ __forceinline__ uint32_t word(const uint4* v, int q) {
  const uint4& u = v[q >> 2];
  const int j = q & 3;
  return j == 0 ? u.x : j == 1 ? u.y : j == 2 ? u.z : u.w;
}

// Host: grid geometry shared by both kernels' launchers and CTA counts. Tiles of `tile` covering n.
inline int64_t ceil_tiles(int64_t n, int64_t tile) { return (n + tile - 1) / tile; }
// Whether output tiles of tile_out rows stay inside the groups of a grouped call (segments and
// ungrouped calls clamp a partial tile to their own end).
inline bool tiles_fit_groups(const Args& a, int64_t tile_out) {
  return a.nseg > 0 || a.opg == a.out || a.opg % tile_out == 0;
}
// Output-tile rows of the grid (blockIdx.y): (out / opg) groups × tiles per group, or the
// segments' tiles one after another.
inline int64_t output_tile_rows(const Args& a, int64_t tile_out) {
  if (a.nseg == 0) return (a.out / a.opg) * ceil_tiles(a.opg, tile_out);
  int64_t n = 0;
  for (int j = 0; j < a.nseg; ++j) n += ceil_tiles(a.seg[j].out, tile_out);
  return n;
}
// Each segment's first output-tile row (seg[j].tile0, what take_tile_segment reads).
inline void set_segment_tile0(Args& a, int64_t tile_out) {
  int64_t n = 0;
  for (int j = 0; j < a.nseg; ++j) {
    a.seg[j].tile0 = n;
    n += ceil_tiles(a.seg[j].out, tile_out);
  }
}

// The grid (x: row tiles, y: output tiles) of a tile_out × tile_rows launch, after setting a's
// segment tile origins; false when such tiles do not take the call (no K, a tile would straddle
// a group, too many tiles).
inline bool tiled_grid(Args& a, int64_t tile_out, int64_t tile_rows, dim3& grid) {
  if (a.in <= 0 || !tiles_fit_groups(a, tile_out)) return false;
  set_segment_tile0(a, tile_out);
  const int64_t gy = output_tile_rows(a, tile_out), gx = ceil_tiles(a.rows, tile_rows);
  if (gy > 65535 || gx > (int64_t{1} << 30)) return false;
  grid = dim3(unsigned(gx), unsigned(gy));
  return true;
}

// The segment of output-tile row `by` of a multi-weight call (a.nseg > 0): calls take(seg, j) with
// the segment's entry and index and returns by's tile index inside it. Static indices only, so
// the launch parameters stay in the constant bank (a dynamic index would copy them to local memory).
template <class F>
__device__ __forceinline__ int64_t take_tile_segment(const Args& a, int64_t by, F&& take) {
  int j = 0;
#pragma unroll
  for (int i = 1; i < kMaxDenseSegments; ++i)
    if (i < a.nseg && by >= a.seg[i].tile0) j = i;
#pragma unroll
  for (int i = 0; i < kMaxDenseSegments; ++i)
    if (i == j) {
      by -= a.seg[i].tile0;
      take(a.seg[i], i);
    }
  return by;
}

// This CTA's slice of a tiled launch (tiled_grid: x row tiles, y output tiles) — the segment or
// group of output-tile row blockIdx.y resolved, as the register kernel does: outputs
// [o0, o_end), rows from n0, group grp, and the segment's weights, output and rounding.
struct TileArgs {
  const uint8_t* w;
  const uint8_t* ws;
  int64_t o0, o_end, n0, grp, out;
  float* y;
  bool round;
  float post_scale;
  int seg;  // the segment of a multi-weight call (0 otherwise)
};
__device__ __forceinline__ TileArgs resolve_tile(const Args& a, int64_t tile_out, int64_t tile_rows) {
  int64_t by = blockIdx.y;
  TileArgs ta{static_cast<const uint8_t*>(a.w), a.ws, 0, 0, int64_t(blockIdx.x) * tile_rows, 0, a.out, a.y, a.round,
              a.post_scale, 0};
  int64_t opg = a.opg;
  if (a.nseg > 0) {
    by = take_tile_segment(a, by, [&](const Args::Seg& sg, int j) {
      ta.seg = j;
      ta.w = static_cast<const uint8_t*>(sg.w);
      ta.ws = sg.ws;
      ta.out = opg = sg.out;
      ta.y = sg.y;
      ta.round = sg.round;
      ta.post_scale = sg.post_scale;
    });
  }
  const int64_t tiles_per_group = (opg + tile_out - 1) / tile_out;
  ta.grp = by / tiles_per_group;
  ta.o0 = ta.grp * opg + (by % tiles_per_group) * tile_out;
  ta.o_end = (ta.grp + 1) * opg;
  return ta;
}

// The shared-memory-staged kernel (linear_mma_staged.cu): the same bits as the register-fed
// tiles (linear_mma.h numerics). The dispatch takes it for calls of ≥ kStagedMinRows rows that
// give it ≥ kStagedMinCtas CTAs (staged_ctas). launch_staged returns false, launching nothing,
// when it does not take the call (groups not a multiple of its 128-output tile, in = 0).
constexpr int64_t kStagedMinRows = 64, kStagedMinCtas = 128;
int64_t staged_ctas(const Args& a);
// The staged lin8 on sm_90a warpgroup MMAs (sm90_linear_wgmma.cu: 128 × 96 tiles, a producer
// warpgroup): the same bits; false (nothing launched) where the staged kernel would decline.
bool launch_wgmma_lin8(const Args& a, cudaStream_t s);
// The same on pre-converted f16 tiles fed by bulk copies (sm90_lin8_bulk.cu: 128 × 128 tiles, two
// small conversion launches first; declines x_row_div ≠ 1, grouped calls, and calls its scratch
// is too small for while capturing).
bool launch_bulk_lin8(const Args& a, cudaStream_t s);
// lin8 for ≤ 64 rows on TMA-streamed weights and register-A wgmma (sm90_lin8_stream.cu: 128-output
// tiles; calls of fewer than 120 tiles split the chains over a cluster, which only any_shape
// takes): the same bits; declines x_row_div ≠ 1, grouped calls, in > 16384 (> 8192 above 16 rows)
// and a missing tensor-map encoder.
bool launch_stream_lin8(const Args& a, cudaStream_t s, bool any_shape);
// The dense path (bf16 or e4m3-as-bf16 weights) for ≤ 64 rows in the same form
// (sm90_dense_stream.cu: 128-output tiles, a launch that splits x into hi / lo tiles first, no
// cluster split): the same bits; declines x_stride or x not 8-byte aligned, e4m3 segments or
// more than 128 K blocks, and calls its scratch is too small for while capturing.
template <Wt WT>
bool launch_stream_dense(const Args& a, cudaStream_t s);
// The bf16 dense path in the same form (sm90_dense_bulk.cu: x split into bf16 hi / lo tiles, a lo
// flag per block).
bool launch_bulk_dense(const Args& a, cudaStream_t s);
// The per-device scratch buffers of the converted tiles, one a kernel family.
enum class ScratchSlot { kLin8Bulk, kDenseBulk, kDenseStream, kCount };
// The scratch of `slot` on the current device: at least `bytes`, grown unless stream s is
// capturing a graph (then null when too small). One call at a time per device and slot (the
// stream's order).
uint8_t* bulk_scratch(ScratchSlot slot, size_t bytes, cudaStream_t s);
template <Wt WT>
bool launch_staged(const Args& a, cudaStream_t s);

// The register-fed tiles (linear_mma.cu): kRegisterTiles configurations, force_tile's indices
// 0 .. kRegisterTiles − 1, any of them the same bits. launch_register_tile launches tile i (false:
// the grid is too large for it); register_tile_fits: no tile of i straddles a group of the call;
// choose_register_tile: the tile a call takes by default (docs/decode-linears.md, round 4).
constexpr int kRegisterTiles = 14;
template <Wt WT>
bool launch_register_tile(int i, const Args& a, cudaStream_t s);
bool register_tile_fits(int i, const Args& a);
template <Wt WT>
int choose_register_tile(const Args& a);

}  // namespace dsv4::gpu::mma::detail
