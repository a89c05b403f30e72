// The FP8 KV dequantization of the sparse decode kernels, exhaustively: every e4m3 code (but the
// NaNs 0x7f, 0xff) under every E8M0 scale byte a cache holds (1..254), through dequant_e4m3x4
// (fp32 products, the kernels' default) and dequant_e4m3x4_int (the ws kernel's
// DSV4_KV_DEQUANT=int), both against the CPU's round_bf16(e4m3 · 2^(e − 127)), bit for bit.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "gpu/sm90_sparse_decode.cuh"
#include "numerics/formats.h"

namespace dsv4::gpu::sm90 {
namespace {

// Block e (0..255) × thread q (0..63): codes 4q..4q+3 under E8M0 byte e; out[2][e][256] bf16 bits
// (0: dequant_e4m3x4, 1: dequant_e4m3x4_int).
__global__ void dequant_all_kernel(uint16_t* out) {
  const uint32_t e = blockIdx.x, q = threadIdx.x;
  const uint32_t codes = (4 * q) | ((4 * q + 1) << 8) | ((4 * q + 2) << 16) | ((4 * q + 3) << 24);
  const uint2 f = dequant_e4m3x4(codes, e8m0_to_float(uint8_t(e)));
  const uint2 i = dequant_e4m3x4_int(codes, e4m3_scale(e));
  uint16_t* o0 = out + e * 256 + 4 * q;
  uint16_t* o1 = out + 256 * 256 + e * 256 + 4 * q;
  const uint32_t fw[2] = {f.x, f.y}, iw[2] = {i.x, i.y};
  for (int k = 0; k < 2; ++k) {
    o0[2 * k] = uint16_t(fw[k]), o0[2 * k + 1] = uint16_t(fw[k] >> 16);
    o1[2 * k] = uint16_t(iw[k]), o1[2 * k + 1] = uint16_t(iw[k] >> 16);
  }
}

TEST(Sm90KvDequant, EveryCodeAndScaleMatchesCpuBothWays) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer<uint16_t> out(size_t(2) * 256 * 256);
  dequant_all_kernel<<<256, 64>>>(out.get());
  CUDA_CHECK_LAUNCH();
  const std::vector<uint16_t> v = out.download();
  int64_t checked = 0, bad[2] = {0, 0};
  for (int e = 1; e <= 254; ++e)
    for (int c = 0; c < 256; ++c) {
      if ((c & 0x7f) == 0x7f) continue;  // NaN codes (their pair neighbours are checked)
      const float ref = numerics::e4m3_to_float(uint8_t(c)) * std::ldexp(1.0f, e - 127);
      const uint16_t want = numerics::float_to_bf16_bits(ref);
      for (int w = 0; w < 2; ++w) {
        const uint16_t got = v[size_t(w) * 65536 + e * 256 + c];
        if (got != want && bad[w]++ < 5)
          ADD_FAILURE() << (w ? "dequant_e4m3x4_int" : "dequant_e4m3x4") << " code 0x" << std::hex << c
                        << " e8m0 0x" << e << ": got 0x" << got << ", want 0x" << want << std::dec;
      }
      ++checked;
    }
  EXPECT_EQ(bad[0], 0);
  EXPECT_EQ(bad[1], 0);
  EXPECT_EQ(checked, 254 * 254);
}

}  // namespace
}  // namespace dsv4::gpu::sm90
