// Tests of dense_linear_fp8 (wo_a kept as e4m3 codes + E8M0 128×128 scales, bf16 arithmetic;
// linear_mma.cu's kFp8AsBf16 tiles, linear.cu's widening path) against dense_linear on the weight
// widened on the host, bit for bit, and of its shape checks. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/check.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "gpu/linear_mma.h"
#include "gpu/ops.h"
#include "numerics/formats.h"

namespace dsv4::gpu {
namespace {

// dense_linear_fp8 (wo_a as stored: e4m3 codes + E8M0 128×128 scales, each weight used as
// bf16(code·scale)) equals dense_linear on the weight widened that way on the host (the
// checkpoint loader's formula) bit for bit: grouped and ungrouped, partial m-tiles, bf16-valued
// activations (odd row counts: some far outside f16's range, the kernel's bf16 fallback) and fp32
// ones, rounded and not, every row count and every tile, with and without the widening scratch;
// the widened path is itself checked against the CPU above (GroupedDenseTest), so this is the CPU
// comparison too. Tile scales 2^-12 .. 2^4 vary per tile (the accumulator's rescaling).
TEST(DenseFp8Test, EqualsTheWidenedWeightBitForBitOnEveryTile) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t out, in, opg;  // opg 0: no groups
  };
  for (const Shape sh : {Shape{1024, 1024, 256}, Shape{200, 512, 0}, Shape{128, 512, 64}}) {
    const int64_t G = sh.opg > 0 ? sh.out / sh.opg : 1, cols = sh.in / 128;
    std::mt19937_64 rng(sh.out * 7 + sh.in);
    std::vector<uint8_t> codes(sh.out * sh.in), sc(((sh.out + 127) / 128) * cols);
    for (uint8_t& c : codes) {
      c = uint8_t(rng());
      if ((c & 0x7f) == 0x7f) c ^= 1;  // no NaN codes; subnormals, ±0 and ±448 stay
    }
    for (uint8_t& e : sc) e = uint8_t(127 - 12 + rng() % 17);  // 2^-12 .. 2^4
    std::vector<uint16_t> widened(codes.size());
    for (int64_t o = 0; o < sh.out; ++o)
      for (int64_t i = 0; i < sh.in; ++i)
        widened[o * sh.in + i] = numerics::float_to_bf16_bits(numerics::e4m3_to_float(codes[o * sh.in + i]) *
                                                              numerics::e8m0_to_float(sc[(o / 128) * cols + i / 128]));
    auto dw = to_device(codes), ds = to_device(sc);
    auto dwb = to_device(widened);
    DeviceBuffer<uint16_t> wide(sh.out * sh.in);  // the device widening equals the host's
    widen_fp8_tiles(dw.get(), ds.get(), sh.out, sh.in, wide.get(), nullptr);
    EXPECT_EQ(wide.download(), widened) << "widen_fp8_tiles out " << sh.out << " in " << sh.in;
    for (const int64_t rows : {1, 3, 8, 16, 37, 64, 130}) {
      const int64_t xstride = G * sh.in;
      const auto xb = random_bf16(rows * xstride, 1.0f, 300 + rows);
      std::vector<float> xf(rows * xstride);
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (float& v : xf) v = d(rng);  // full fp32 mantissas: the lo MMAs run
      std::vector<float> xe = xb;      // bf16 values outside f16's exact range in some steps
      for (size_t i = 0; i < xe.size(); i += 97) xe[i] = numerics::round_bf16(xe[i] * (i % 2 ? 1e6f : 1e-7f));
      auto dxb = to_device(rows % 2 ? xe : xb), dxf = to_device(xf);
      for (const bool fp32_x : {false, true}) {
        const float* x = fp32_x ? dxf.get() : dxb.get();
        DeviceBuffer<float> want_d(rows * sh.out), got_d(rows * sh.out);
        mma::force_tile(-1);
        dense_linear(x, rows, xstride, dwb.get(), true, sh.out, sh.in, sh.opg, !fp32_x, 0.0f, want_d.get(), nullptr);
        const auto want = want_d.download();
        for (int t = -1; t < mma::tile_count(); ++t) {
          mma::force_tile(t);
          dense_linear_fp8(x, rows, xstride, dw.get(), ds.get(), sh.out, sh.in, sh.opg, !fp32_x, got_d.get(), nullptr);
          const auto got = got_d.download();
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
              << "out " << sh.out << " in " << sh.in << " opg " << sh.opg << " rows " << rows << " fp32 x " << fp32_x
              << " tile " << t;
        }
        mma::force_tile(-1);
        // With x's bf16 copy and per-row flags (decode_rope_inverse_bf16's output): rows of bf16
        // values are read from it (fragments of such rows only; fp32 x rows are flagged 0), the
        // same bits.
        const int64_t per_row = (xstride + kBf16CopyFlagValues - 1) / kBf16CopyFlagValues;
        std::vector<uint16_t> x16(rows * xstride, 0);
        std::vector<int32_t> ok(rows * per_row, 1);
        const std::vector<float>& xh = fp32_x ? xf : (rows % 2 ? xe : xb);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t i = 0; i < xstride; ++i) {
            const float v = xh[r * xstride + i];
            x16[r * xstride + i] = numerics::float_to_bf16_bits(v);
            if (numerics::round_bf16(v) != v) ok[r * per_row + i / kBf16CopyFlagValues] = 0;
          }
        auto dx16 = to_device(x16);
        auto dok = to_device(ok);
        for (const int t : {-1, 0, 2, 5, 11, mma::stream_tile()}) {
          mma::force_tile(t);
          dense_linear_fp8(x, rows, xstride, dw.get(), ds.get(), sh.out, sh.in, sh.opg, !fp32_x, got_d.get(), nullptr,
                           nullptr, dx16.get(), dok.get());
          const auto got = got_d.download();
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
              << "x16: out " << sh.out << " rows " << rows << " fp32 x " << fp32_x << " tile " << t;
        }
        mma::force_tile(-1);
        // With a scratch: above kDenseFp8MaxRows the widened weight's GEMM path, below the same.
        dense_linear_fp8(x, rows, xstride, dw.get(), ds.get(), sh.out, sh.in, sh.opg, !fp32_x, got_d.get(), nullptr,
                         wide.get());
        const auto got = got_d.download();
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
            << "with scratch: out " << sh.out << " rows " << rows << " fp32 x " << fp32_x;
      }
    }
  }
}

// A shape the kernel does not take is an error that names it, not a silent fallback.
TEST(DenseFp8Test, RejectsAShapeItCannotRunWithAClearError) {
  SKIP_WITHOUT_GPU();
  EXPECT_FALSE(dense_linear_fp8_accepts(256, 100, 0, 100));
  EXPECT_FALSE(dense_linear_fp8_accepts(256, 512, 40, 512));
  EXPECT_TRUE(dense_linear_fp8_accepts(256, 512, 64, 2048));
  DeviceBuffer<uint8_t> w(256 * 200), s(2 * 2);
  DeviceBuffer<float> x(200), y(256);
  try {
    dense_linear_fp8(x.get(), 1, 200, w.get(), s.get(), 256, 200, 0, true, y.get(), nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[256, 200]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsv4::gpu
