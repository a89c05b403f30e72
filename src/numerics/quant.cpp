#include "numerics/quant.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace dsv4::numerics {
namespace {

float block_amax(std::span<const float> x) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  return amax;
}

}  // namespace

float q8_block_scale(float amax) {
  const float a = std::max(amax, 1e-4f);
  return std::ldexp(1.0f, ceil_log2_bits(a * (1.0f / 448.0f)));
}

float q4_block_scale(float amax) {
  const float a = std::max(amax, 6.0f * 0x1p-126f);
  return std::ldexp(1.0f, ceil_log2_bits(a * (1.0f / 6.0f)));
}

void quantize_q8(std::span<const float> x, int block, std::span<uint8_t> codes,
                 std::span<float> scales) {
  DSV4_CHECK(block > 0 && x.size() % static_cast<size_t>(block) == 0, "Q8: length ", x.size(),
             " is not a multiple of the block ", block);
  DSV4_CHECK(codes.size() == x.size() && scales.size() == x.size() / block, "Q8: output sizes");
  for (size_t b = 0; b < scales.size(); ++b) {
    auto blk = x.subspan(b * block, block);
    const float s = q8_block_scale(block_amax(blk));
    scales[b] = s;
    for (int i = 0; i < block; ++i) {
      const float v = std::clamp(blk[i] / s, -448.0f, 448.0f);
      codes[b * block + i] = float_to_e4m3(v);
    }
  }
}

namespace {

// x ← bf16(decode(encode(clamp(x/s, ±max)))·s) per block, s = scale_of(block amax).
template <class ScaleOf, class RoundTrip>
void simulate_blocks(std::span<float> x, int block, const char* what, float max,
                     ScaleOf scale_of, RoundTrip round_trip) {
  DSV4_CHECK(block > 0 && x.size() % static_cast<size_t>(block) == 0, what, ": length ",
             x.size(), " is not a multiple of the block ", block);
  for (size_t b = 0; b < x.size(); b += block) {
    auto blk = x.subspan(b, block);
    const float s = scale_of(block_amax(blk));
    for (float& v : blk) v = round_bf16(round_trip(std::clamp(v / s, -max, max)) * s);
  }
}

}  // namespace

void simulate_q8(std::span<float> x, int block) {
  simulate_blocks(x, block, "Q8 simulate", 448.0f, q8_block_scale,
                  [](float v) { return e4m3_to_float(float_to_e4m3(v)); });
}

void simulate_q4(std::span<float> x, int block) {
  simulate_blocks(x, block, "Q4 simulate", 6.0f, q4_block_scale,
                  [](float v) { return e2m1_to_float(float_to_e2m1(v)); });
}

}  // namespace dsv4::numerics
