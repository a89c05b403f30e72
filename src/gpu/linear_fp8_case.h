// Test-only: random FP8 block-quantized weights with their CPU reference (the linear tests of
// linear_mma_test.cu and linear_wgmma_test.cu).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/linear.h"
#include "gpu/gpu_test_util.h"
#include "model/make_tiny.h"
#include "numerics/formats.h"

namespace dsv4::gpu {

// Random bf16 weights [out, in] quantized to FP8 128 × 128 blocks, the block scales spread by
// −2 … +2 binades (order-sensitive sums), and the CPU reference linear of the same values.
struct Fp8Case {
  std::vector<uint8_t> codes, sc;
  cpu::Fp8Linear ref;
  Fp8Case(int64_t out, int64_t in, uint64_t seed) : ref{.out = out, .in = in} {
    const auto wf = random_bf16(out * in, 0.05f, seed);
    codes.resize(out * in);
    sc.resize(((out + 127) / 128) * ((in + 127) / 128));
    model::quantize_fp8_blocks(wf.data(), out, in, codes.data(), sc.data());
    for (size_t i = 0; i < sc.size(); ++i)
      sc[i] = uint8_t(sc[i] + int(i % 5) - 2);  // order-sensitive sums
    for (uint8_t c : codes) ref.weight.push_back(numerics::e4m3_to_float(c));
    for (uint8_t c : sc) ref.scale.push_back(numerics::e8m0_to_float(c));
  }
};

}  // namespace dsv4::gpu
