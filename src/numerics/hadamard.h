// Normalized Sylvester Walsh–Hadamard transform used by the lightning indexer (spec §4.0):
// y = bf16( fp32(x · H_n) · fp32(n^-0.5) ), H[i][j] = (−1)^popcount(i & j), natural order.
// x · H_n is computed exactly (fast transform in double, exact for bf16 inputs and n ≤ 2^20)
// and rounded to fp32 once, matching the reference's correctly rounded emulation.
#pragma once

#include <span>

namespace dsv4::numerics {

// In place on a power-of-two length vector of bf16-valued floats.
void hadamard_bf16(std::span<float> x);

}  // namespace dsv4::numerics
