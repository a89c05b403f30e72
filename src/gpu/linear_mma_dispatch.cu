// Which tensor-core kernel takes a lin8 / bf16 dense call (contract: linear_mma.h): the
// register-fed tiles (linear_mma.cu), the shared-memory-staged GEMM (linear_mma_staged.cu), the
// warpgroup-MMA forms (sm90_linear_wgmma.cu, sm90_lin8_bulk.cu, sm90_dense_bulk.cu,
// sm90_lin8_stream.cu) — every one gives the same bits, so the choice is speed only, by rules
// measured on H200 (each rule names its measurement) — and the forced tiles of tests and
// benchmarks; then the launchers' public entry points.
#include <cstdlib>
#include <limits>

#include "base/env.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_mma.h"
#include "gpu/linear_mma_common.cuh"

namespace dsv4::gpu::mma {
namespace {

using namespace detail;

constexpr int kNumTiles = kRegisterTiles;
int g_forced_tile = -1;

// Calls of at least this many rows that give the staged kernel at least kStagedMinCtas CTAs take
// it (same bits): kStagedMinRows, DSV4_MMA_STAGED_MIN_ROWS when set (0: never; benchmarks compare
// both). Rule from gpu_linear_bench on H200 (docs/decode-linears.md, round 6): its CTA walks the
// whole K, so it wins where the call has enough output tiles to fill the SMs.
int64_t staged_min_rows() {
  static const int64_t rows = [] {
    const char* v = std::getenv("DSV4_MMA_STAGED_MIN_ROWS");
    const int64_t r = v != nullptr && v[0] != '\0' ? std::atoll(v) : kStagedMinRows;
    return r <= 0 ? std::numeric_limits<int64_t>::max() : r;
  }();
  return rows;
}

// lin8 calls of at least kWgmmaMinRows rows that take the staged tile run its warp-specialized
// warpgroup-MMA form instead (sm90_linear_wgmma.cu, same bits) unless DSV4_LIN8_WGMMA=0. H200,
// gpu_linear_bench: 16–21 % faster at 4096 rows, up to 36 % slower at 512 (fewer, longer CTAs).
constexpr int64_t kWgmmaMinRows = 2048;
bool lin8_wgmma_enabled() {
  static const bool on = env_switch_on("DSV4_LIN8_WGMMA");
  return on;
}
// From the same rows, lin8 and the bf16 dense path on bulk-copied pre-converted tiles
// (sm90_lin8_bulk.cu, sm90_dense_bulk.cu; docs/prefill.md) unless DSV4_LIN8_BULK=0 (lin8 then
// takes the form above) / DSV4_DENSE_BULK=0 (the staged kernel).
bool lin8_bulk_enabled() {
  static const bool on = env_switch_on("DSV4_LIN8_BULK");
  return on;
}
bool dense_bulk_enabled() {
  static const bool on = env_switch_on("DSV4_DENSE_BULK");
  return on;
}

// Mid-size calls take the bulk forms too where they launch enough 128 × 128 tiles (same bits):
// lin8 from kBulkLin8MinRows rows and kBulkLin8MinCtas tiles, bf16 dense from kBulkDenseMinRows
// and kBulkDenseMinCtas. Rule from H200 gpu_linear_bench (docs/prefill.md, seventeenth session):
// lin8 wq_b 16384 × 1024 / wo_b 4096 × 4096 at 512 rows 156.7 / 135.1 → 122.2 / 102.1 µs, at 256
// rows the staged kernel stays ahead (80.8 / 69.6 vs 88.0 / 95.2); dense wo_a grouped 4 × 1024 ×
// 4096 at 128 rows 91.4 → 74.7, compressor 1024 × 4096 at 512 rows 90.3 → 52.6 but at 256 rows
// (16 tiles) 46.6 vs 51.3.
constexpr int64_t kBulkLin8MinRows = 512, kBulkLin8MinCtas = 128, kBulkDenseMinRows = 128, kBulkDenseMinCtas = 32;
// lin8 calls of kStreamLin8MinRows .. kStreamLin8MaxRows rows with at least 120 output tiles of
// 128 take the TMA-streamed kernel (sm90_lin8_stream.cu, same bits) unless DSV4_LIN8_STREAM=0.
// Rule from H200 gpu_linear_bench (docs/decode-linears.md, round 15): wq_b 32768 × 1024 at 16 /
// 32 / 64 rows 21.0 / 36.9 / 42.3 → 15.7 / 25.0 / 32.8 µs; at 1 row, and wherever its cluster
// split runs (fewer tiles), the register-fed tiles stay ahead.
constexpr int64_t kStreamLin8MinRows = 9, kStreamLin8MaxRows = 64;
bool lin8_stream_enabled() {
  static const bool on = env_switch_on("DSV4_LIN8_STREAM");
  return on;
}
// bf16 dense calls of kStreamDenseMinRows .. 64 rows with at least kStreamDenseMinTiles output
// tiles of 128 take the TMA-streamed kernel (sm90_dense_stream.cu, same bits) unless
// DSV4_DENSE_STREAM=0. Rule from H200 gpu_linear_bench (docs/decode-linears.md, round 16): the
// LM head 129280 × 4096 at 8 / 16 / 32 / 64 rows 279.3 / 366.6 / 698.3 / 747.8 → 257.8 / 259.2 /
// 268.5 / 289.8 µs (equal at one row); calls of 8–32 tiles (wo_a, the compressors) stay on the
// register tiles, which lead there below 64 rows. e4m3-as-bf16 weights (wo_a) from
// kStreamFp8MinRows rows and kStreamFp8MinTiles tiles: TP1's 8 × 1024 × 4096 with x's bf16 copy
// at 32 / 64 rows 31.7 / 57.1 → 29.8 / 42.8 µs; TP2's 32 tiles and ≤ 16 rows stay on the register
// tiles (TP2 at 64 rows 29.9 vs 39.5).
constexpr int64_t kStreamDenseMinRows = 2, kStreamDenseMaxRows = 64, kStreamDenseMinTiles = 120;
constexpr int64_t kStreamFp8MinRows = 32, kStreamFp8MinTiles = 64;
bool dense_stream_enabled() {
  static const bool on = env_switch_on("DSV4_DENSE_STREAM");
  return on;
}
int64_t bulk_ctas(const Args& a) { return output_tile_rows(a, 128) * ceil_tiles(a.rows, 128); }

// The staged kernel has no e4m3-as-bf16 form: those calls stay on the register-fed tiles.
// Forced tiles (tests, benchmarks): 0 .. kNumTiles − 1 the register-fed tiles, kNumTiles the
// staged kernel, kNumTiles + 1 the warpgroup-MMA lin8, kNumTiles + 2 the bulk-copy forms (lin8
// and bf16 dense), kNumTiles + 3 the TMA-streamed forms (lin8 and bf16 dense, ≤ 64 rows, any tile
// count); other calls: the default choice.
template <Wt WT>
bool dispatch(const Args& a, cudaStream_t s) {
  constexpr bool kStaged = WT != Wt::kFp8AsBf16;
  if constexpr (kStaged)
    if (g_forced_tile == kNumTiles && launch_staged<WT>(a, s)) return true;  // the staged tile, forced
  if constexpr (WT == Wt::kFp8)
    if ((g_forced_tile == kNumTiles + 1 && launch_wgmma_lin8(a, s)) ||
        (g_forced_tile == kNumTiles + 2 && launch_bulk_lin8(a, s)) ||
        (g_forced_tile == kNumTiles + 3 && launch_stream_lin8(a, s, true)))
      return true;
  if constexpr (WT == Wt::kBf16)
    if (g_forced_tile == kNumTiles + 2 && launch_bulk_dense(a, s)) return true;
  if constexpr (WT != Wt::kFp8)
    if (g_forced_tile == kNumTiles + 3 && launch_stream_dense<WT>(a, s)) return true;
  if (g_forced_tile >= 0 && g_forced_tile < kNumTiles && register_tile_fits(g_forced_tile, a))
    return launch_register_tile<WT>(g_forced_tile, a, s);
  if constexpr (WT == Wt::kFp8)
    if (a.rows >= kStreamLin8MinRows && a.rows <= kStreamLin8MaxRows && lin8_stream_enabled() &&
        launch_stream_lin8(a, s, false))
      return true;
  if constexpr (WT != Wt::kFp8) {
    const bool fp8 = WT == Wt::kFp8AsBf16;
    if (a.rows >= (fp8 ? kStreamFp8MinRows : kStreamDenseMinRows) && a.rows <= kStreamDenseMaxRows &&
        output_tile_rows(a, 128) >= (fp8 ? kStreamFp8MinTiles : kStreamDenseMinTiles) && dense_stream_enabled() &&
        launch_stream_dense<WT>(a, s))
      return true;
  }
  if constexpr (WT == Wt::kFp8)
    if (a.rows >= kBulkLin8MinRows && a.rows < kWgmmaMinRows && bulk_ctas(a) >= kBulkLin8MinCtas &&
        lin8_wgmma_enabled() && lin8_bulk_enabled() && launch_bulk_lin8(a, s))
      return true;
  if constexpr (WT == Wt::kBf16)
    if (a.rows >= kBulkDenseMinRows && a.rows < kWgmmaMinRows && bulk_ctas(a) >= kBulkDenseMinCtas &&
        dense_bulk_enabled() && launch_bulk_dense(a, s))
      return true;
  if constexpr (kStaged)
    if (a.rows >= staged_min_rows() && staged_ctas(a) >= kStagedMinCtas) {
      if constexpr (WT == Wt::kFp8)
        if (a.rows >= kWgmmaMinRows && lin8_wgmma_enabled() &&
            ((lin8_bulk_enabled() && launch_bulk_lin8(a, s)) || launch_wgmma_lin8(a, s)))
          return true;
      if constexpr (WT == Wt::kBf16)
        if (a.rows >= kWgmmaMinRows && dense_bulk_enabled() && launch_bulk_dense(a, s)) return true;
      if (launch_staged<WT>(a, s)) return true;
    }
  return launch_register_tile<WT>(choose_register_tile<WT>(a), a, s);
}

}  // namespace

bool lin8(const uint8_t* xq, const float* xs, int64_t rows, int x_row_div, const uint8_t* w,
          const uint8_t* ws, int64_t out, int64_t in, float* y, bool round_out, cudaStream_t s) {
  if (in % 128 != 0 || !aligned16(xq) || !aligned16(w) || rows <= 0 || out <= 0) return false;
  const Args a{.x = xq, .xs = xs, .x_row_div = x_row_div, .x_stride = in, .w = w, .ws = ws, .rows = rows,
               .out = out, .in = in, .opg = out, .tiles_per_group = 1, .round = round_out, .post_scale = 0.0f,
               .y = y};
  return dispatch<Wt::kFp8>(a, s);
}

bool dense_bf16(const float* x, int64_t rows, int64_t x_stride, const uint16_t* w, int64_t out,
                int64_t in, int64_t opg, bool round_bf16, float post_scale, float* y, cudaStream_t s) {
  if (opg <= 0) opg = out;
  if (in % 128 != 0 || x_stride % 4 != 0 || out % opg != 0 || (opg != out && opg % 16 != 0) || !aligned16(x) ||
      !aligned16(w) || rows <= 0)
    return false;
  const Args a{.x = x, .xs = nullptr, .x_row_div = 1, .x_stride = x_stride, .w = w, .ws = nullptr, .rows = rows,
               .out = out, .in = in, .opg = opg, .tiles_per_group = 1, .round = round_bf16,
               .post_scale = post_scale, .y = y};
  return dispatch<Wt::kBf16>(a, s);
}

bool dense_fp8_as_bf16(const float* x, int64_t rows, int64_t x_stride, const uint8_t* w, const uint8_t* ws,
                       int64_t out, int64_t in, int64_t opg, bool round_bf16, float* y, cudaStream_t s,
                       const uint16_t* x16, const int32_t* x16_ok, int64_t flag_values) {
  if (opg <= 0) opg = out;
  if (!dense_fp8_as_bf16_accepts(out, in, opg, x_stride) || !aligned16(x) || !aligned16(w) || ws == nullptr ||
      rows <= 0 || (x16 == nullptr) != (x16_ok == nullptr) || !aligned16(x16) || (x16 != nullptr && flag_values <= 0))
    return false;
  const Args a{.x = x, .xs = nullptr, .x_row_div = 1, .x_stride = x_stride, .w = w, .ws = ws, .rows = rows,
               .out = out, .in = in, .opg = opg, .tiles_per_group = 1, .round = round_bf16, .post_scale = 0.0f,
               .y = y, .x16 = x16, .x16_ok = x16_ok, .x16_flag_values = flag_values};
  return dispatch<Wt::kFp8AsBf16>(a, s);
}

bool dense_fp8_as_bf16_accepts(int64_t out, int64_t in, int64_t opg, int64_t x_stride) {
  if (opg <= 0) opg = out;
  return in > 0 && in % 128 == 0 && x_stride % 4 == 0 && out > 0 && out % opg == 0 && (opg == out || opg % 16 == 0);
}

bool dense_bf16_multi(const float* x, int64_t rows, int64_t in, const DenseSegment* segs, int nseg, cudaStream_t s) {
  if (nseg < 1 || nseg > kMaxDenseSegments || in % 128 != 0 || !aligned16(x) || rows <= 0) return false;
  Args a{.x = x, .xs = nullptr, .x_row_div = 1, .x_stride = in, .w = segs[0].w, .ws = nullptr, .rows = rows,
         .out = segs[0].out, .in = in, .opg = segs[0].out, .tiles_per_group = 1, .round = false, .post_scale = 0.0f,
         .y = segs[0].y, .nseg = nseg, .seg = {}};
  for (int j = 0; j < nseg; ++j) {
    if (segs[j].out <= 0 || !aligned16(segs[j].w)) return false;
    a.seg[j] = {.w = segs[j].w, .ws = nullptr, .out = segs[j].out, .tile0 = 0, .y = segs[j].y,
                .round = segs[j].round_bf16, .post_scale = segs[j].post_scale};
  }
  return dispatch<Wt::kBf16>(a, s);
}

bool lin8_multi(const uint8_t* xq, const float* xs, int64_t rows, int64_t in, const Lin8Segment* segs, int nseg,
                cudaStream_t s) {
  if (nseg < 1 || nseg > kMaxDenseSegments || in % 128 != 0 || !aligned16(xq) || rows <= 0) return false;
  Args a{.x = xq, .xs = xs, .x_row_div = 1, .x_stride = in, .w = segs[0].w, .ws = segs[0].ws, .rows = rows,
         .out = segs[0].out, .in = in, .opg = segs[0].out, .tiles_per_group = 1, .round = segs[0].round_out,
         .post_scale = 0.0f, .y = segs[0].y, .nseg = nseg, .seg = {}};
  for (int j = 0; j < nseg; ++j) {
    if (segs[j].out <= 0 || !aligned16(segs[j].w)) return false;
    a.seg[j] = {.w = segs[j].w, .ws = segs[j].ws, .out = segs[j].out, .tile0 = 0, .y = segs[j].y,
                .round = segs[j].round_out, .post_scale = 0.0f};
  }
  return dispatch<Wt::kFp8>(a, s);
}

int tile_count() { return kNumTiles + 4; }  // the register-fed tiles, the staged one, three wgmma forms
int bulk_tile() { return kNumTiles + 2; }
int stream_tile() { return kNumTiles + 3; }
void force_tile(int i) { g_forced_tile = i >= 0 && i < tile_count() ? i : -1; }

}  // namespace dsv4::gpu::mma
