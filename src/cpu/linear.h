// Linear layers of the CPU reference backend, each with the reference's exact rounding
// points (spec §4.0). Activations are std::span<const float> holding bf16 values; outputs
// are written as floats (bf16-rounded where the reference rounds).
//
//   Fp8Linear  (Lin8): x → Q8(x,128) codes+scales; per 128-wide K block an exact partial
//                      Σ q·w (double, exact for e4m3 products), rounded to fp32 once;
//                      acc += partial·(s_x·s_w) in fp32, K order; out = bf16(acc).
//   Fp4Linear  (Lin4): same activation quantization; 32-wide K blocks;
//                      acc += (partial·s_x)·s_w; out = bf16(acc).
//   Bf16Linear        : bf16 × bf16, fp32 result rounded to bf16 (indexer weights_proj,
//                      grouped wo_a after its bf16 dequantization).
//   Fp32Linear        : fp32 × fp32 → fp32 (compressors, router, mHC mixes, LM head);
//                      accumulated in double and rounded once.
// Weights are decoded to fp32 at load (exact: every e4m3/e2m1/bf16 value is an fp32 value).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4::cpu {

struct Fp8Linear {
  int64_t out = 0, in = 0;
  std::vector<float> weight;  // [out, in] decoded e4m3 codes (unscaled)
  std::vector<float> scale;   // [ceil(out/128), ceil(in/128)] e8m0 block scales
  void forward(std::span<const float> x, std::span<float> y) const;
};

struct Fp4Linear {
  int64_t out = 0, in = 0;
  std::vector<float> weight;  // [out, in] decoded e2m1 values (unscaled)
  std::vector<float> scale;   // [out, in/32] e8m0 scales
  void forward(std::span<const float> x, std::span<float> y) const;
};

struct Bf16Linear {
  int64_t out = 0, in = 0;
  std::vector<float> weight;  // [out, in] bf16 values
  void forward(std::span<const float> x, std::span<float> y) const;
};

struct Fp32Linear {
  int64_t out = 0, in = 0;
  std::vector<float> weight;  // [out, in]
  void forward(std::span<const float> x, std::span<float> y) const;
  // Rows [row_begin, row_end) of the output only (y is the whole [out] vector); lets callers
  // split a large matvec (the LM head) across threads.
  void forward_rows(std::span<const float> x, std::span<float> y, int64_t row_begin,
                    int64_t row_end) const;
};

// RMSNorm_w: fp32 mean of squares, x·rsqrt(ms+eps), times the fp32 weight, rounded to bf16.
void rms_norm(std::span<const float> x, std::span<const float> weight, float eps,
              std::span<float> y);

// Q8 activation quantization of a row for the linear layers (block 128): codes as floats.
void quantize_activation_q8(std::span<const float> x, std::vector<float>& q,
                            std::vector<float>& scales);

}  // namespace dsv4::cpu
