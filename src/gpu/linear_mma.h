// Tensor-core (mma.sync m16n8k16) lin8 and bf16 dense linear for every row count
// (docs/decode-linears.md). Internal to linear.cu: the ops.h launchers call these for the shapes
// they accept (return false: the caller keeps its other kernels).
//
// Numerics (tolerance-equal to the CPU, bitwise batch-invariant): output element (r, o) is the
// sum, in warp order w = 0..7, of warp w's accumulator over the 128-wide K blocks kb ≡ w (mod 8)
// taken in increasing kb. lin8: a block's partial is a fresh fp32 MMA chain of e4m3 values
// converted exactly to f16 (8 k16 steps in a fixed lane permutation of the block), added as
// acc += partial·(s_x·s_w) in fp32; the eight warp sums add in fp32. Dense bf16: x is split into
// bf16 hi + lo (x = hi + lo exactly for bf16-valued x, within 2^-17 otherwise), one fp32 MMA chain
// per warp over its blocks, the eight warp sums add in double, rounded to fp32 once. None of this
// depends on the number of rows, the tile a row lands in, or the launch configuration.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::gpu::mma {

// xq [rows / x_row_div, in] e4m3, xs [.., in/128]; w [out, in] e4m3, ws [ceil(out/128), in/128].
// Accepts in % 128 == 0 and 16-byte aligned xq / w; y [rows, out].
bool lin8(const uint8_t* xq, const float* xs, int64_t rows, int x_row_div, const uint8_t* w,
          const uint8_t* ws, int64_t out, int64_t in, float* y, bool round_out, cudaStream_t s);

// x fp32 [rows, x_stride] (group g reads x[g·in ..]), w bf16 [out, in]; ops.h dense_linear.
// Accepts in % 128 == 0, x_stride % 4 == 0, out % opg == 0, opg % 16 == 0, 16-byte aligned x / w.
bool dense_bf16(const float* x, int64_t rows, int64_t x_stride, const uint16_t* w, int64_t out,
                int64_t in, int64_t opg, bool round_bf16, float post_scale, float* y, cudaStream_t s);

// dense_bf16 on a weight stored as e4m3 codes w [out, in] with E8M0 scales ws [ceil(out/128),
// in/128] per 128×128 tile, each weight used as bf16(code·scale) (the reference's wo_a): the
// same bits as dense_bf16 on the weight widened that way, from half its bytes. No post_scale.
// Accepts what dense_fp8_as_bf16_accepts says (the shape) with 16-byte aligned x / w.
// x16 / x16_ok (optional, both or neither): x's bf16 bits with the same layout, and per row and
// block of flag_values values whether x is bf16-valued there (x16_ok [rows, ceil(x_stride /
// flag_values)]; decode_rope_inverse_bf16 writes both); fragments whose rows are, over the group's
// values, read x16 (2 bytes a value, no conversion), the others x. Same bits either way.
bool dense_fp8_as_bf16(const float* x, int64_t rows, int64_t x_stride, const uint8_t* w, const uint8_t* ws,
                       int64_t out, int64_t in, int64_t opg, bool round_bf16, float* y, cudaStream_t s,
                       const uint16_t* x16 = nullptr, const int32_t* x16_ok = nullptr, int64_t flag_values = 0);
// Whether dense_fp8_as_bf16 takes this shape: dense_bf16's rules (in % 128 == 0, x_stride % 4 == 0,
// out % opg == 0, groups of a multiple of 16 rows; opg ≤ 0 means out). Tiles then start at
// multiples of 16 rows, so no 16-row MMA tile straddles a 128-row scale block.
bool dense_fp8_as_bf16_accepts(int64_t out, int64_t in, int64_t opg, int64_t x_stride);

// Several bf16 dense linears of the same x [rows, in] (x_stride = in, no groups) in one launch:
// output j is y_j [rows, out_j] = W_j x, bit-identical to dense_bf16 on that weight alone.
constexpr int kMaxDenseSegments = 6;
struct DenseSegment {
  const uint16_t* w = nullptr;  // bf16 [out, in]
  int64_t out = 0;
  float* y = nullptr;           // [rows, out]
  bool round_bf16 = false;
  float post_scale = 0.0f;
};
bool dense_bf16_multi(const float* x, int64_t rows, int64_t in, const DenseSegment* segs, int nseg, cudaStream_t s);

// Several lin8 weights over the same Q8 activations xq [rows, in] (x_row_div = 1) in one launch:
// output j equals lin8 on that weight alone bit for bit. At most kMaxDenseSegments.
struct Lin8Segment {
  const uint8_t* w = nullptr;   // e4m3 [out, in]
  const uint8_t* ws = nullptr;  // E8M0 [ceil(out/128), in/128]
  int64_t out = 0;
  float* y = nullptr;           // [rows, out]
  bool round_out = true;
};
bool lin8_multi(const uint8_t* xq, const float* xs, int64_t rows, int64_t in, const Lin8Segment* segs, int nseg,
                cudaStream_t s);

// Tests and benchmarks: run every later call on tile configuration i (0 .. tile_count() − 1; the
// last four are the shared-memory-staged kernel, its warpgroup-MMA lin8 form, the bulk-copy
// forms of lin8 and bf16 dense (bulk_tile()) and the TMA-streamed lin8 and bf16 dense for ≤ 64 rows
// (stream_tile()); a tile that does not fit a call falls back to the default), −1 = choose by
// rows again. Every tile gives the same bits. Not thread-safe; not for the model.
int tile_count();
int bulk_tile();
int stream_tile();
void force_tile(int i);

}  // namespace dsv4::gpu::mma
