// Activation quantizers of the reference kernels (spec §4.0, kernel act_quant / fp4_act_quant).
//
// Q8 (FP8, block b): per block of b contiguous values, amax = max(max|x|, 1e-4),
//   s = 2^ceil_log2(amax * fp32(1/448)) (bit trick), q = e4m3(clamp(x/s, ±448)) (RNE).
// Q4 (FP4, block 32): amax = max(max|x|, 6·2^-126), s = 2^ceil_log2(amax * fp32(1/6)),
//   q = e2m1(clamp(x/s, ±6)) (RNE, ties to even code).
// "Simulate" writes bf16(float(q) · s) back into the input, as the reference does in place.
#pragma once

#include <cstdint>
#include <span>

#include "numerics/formats.h"

namespace dsv4::numerics {

// Power-of-two scale of a Q8 block with absolute maximum `amax` (before the 1e-4 floor).
float q8_block_scale(float amax);
// Power-of-two scale of a Q4 block with absolute maximum `amax` (before the floor).
float q4_block_scale(float amax);

// Quantizes x (length multiple of `block`) to e4m3 codes plus one fp32 power-of-two scale
// per block. codes.size() == x.size(), scales.size() == x.size() / block.
void quantize_q8(std::span<const float> x, int block, std::span<uint8_t> codes,
                 std::span<float> scales);

// In-place Q8 simulation on bf16-valued floats: x ← bf16(e4m3(x/s)·s), per block.
void simulate_q8(std::span<float> x, int block);
// In-place Q4 simulation (block 32 in the model): x ← bf16(e2m1(x/s)·s), per block.
void simulate_q4(std::span<float> x, int block);

}  // namespace dsv4::numerics
