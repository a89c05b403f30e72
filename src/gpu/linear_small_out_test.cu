// small_out_linear (linear_small_out.cu) against the CPU's fp32 linear (double sum, one fp32
// rounding) on fresh random inputs, and its batch invariance. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "cpu/linear.h"
#include "cpu/mhc.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "gpu/ops.h"
#include "numerics/formats.h"

namespace dsv4::gpu {
namespace {

std::vector<float> random_f32(size_t n, float std, uint64_t seed, bool bf16_values) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_values ? numerics::round_bf16(d(rng)) : d(rng);
  return v;
}

// rows, out, in, bf16 weights
using SmallOutShape = std::tuple<int64_t, int64_t, int64_t, bool>;
class SmallOutLinearTest : public ::testing::TestWithParam<SmallOutShape> {};

// Every output within 1 fp32 ulp of the CPU's (the two double sums differ only in their last
// bits, so the fp32 roundings agree except within ~2^-29 of a tie) and almost all bit-equal.
TEST_P(SmallOutLinearTest, MatchesCpuFp32Linear) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const auto [rows, out, in, bf16] = GetParam();
  const auto w = random_f32(out * in, 0.02f, 11 + out, bf16);
  const auto x = random_f32(rows * in, 1.0f, 12 + rows, false);
  cpu::Fp32Linear ref{.out = out, .in = in, .weight = w};
  std::vector<float> want(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    ref.forward(std::span(x).subspan(r * in, in), std::span(want).subspan(r * out, out));
  const std::vector<uint16_t> bits = to_bf16_bits(w);
  auto dx = to_device(x);
  auto dwf = to_device(w);
  auto dwb = to_device(bits);
  const int64_t need = small_out_linear_workspace(rows, out, in);
  DeviceBuffer<double> ws(static_cast<size_t>(need));
  DeviceBuffer<float> y(rows * out);
  small_out_linear(dx.get(),
                   rows,
                   in,
                   bf16 ? static_cast<const void*>(dwb.get()) : dwf.get(),
                   bf16,
                   out,
                   in,
                   ws.get(),
                   need,
                   y.get(),
                   nullptr);
  const auto got = y.download();
  int64_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    ++differ;
    EXPECT_EQ(std::nextafter(want[i], got[i]), got[i])
        << "row " << i / out << " out " << i % out << ": gpu " << got[i] << " cpu " << want[i];
  }
  EXPECT_LE(differ, int64_t(got.size() / 1000))
      << differ << " of " << got.size() << " outputs are not bit-equal";
}

// 24 × 16384 and 4 × 16384: the mHC projections (fp32 in the checkpoint); odd K; rows across
// the row block of the workspace (kSmallOutRowBlock).
INSTANTIATE_TEST_SUITE_P(Shapes,
                         SmallOutLinearTest,
                         ::testing::Values(SmallOutShape{1, 24, 16384, false},
                                           SmallOutShape{3, 24, 16384, false},
                                           SmallOutShape{16, 24, 16384, false},
                                           SmallOutShape{64, 24, 16384, false},
                                           SmallOutShape{600, 24, 16384, false},
                                           SmallOutShape{4200, 24, 4096, false},  // two row blocks
                                           SmallOutShape{300, 24, 16384, true},
                                           SmallOutShape{130, 20, 16384, false},
                                           SmallOutShape{1, 4, 16384, false},
                                           SmallOutShape{9, 4, 16384, true},
                                           SmallOutShape{5, 24, 16384, true},
                                           SmallOutShape{7, 17, 1000, false},
                                           SmallOutShape{2, 1, 100, false}));

// A row's outputs are the same bits alone, in a short call, or at another offset of a long one
// (several row blocks), and the same again on a second call (GpuModel: batched decode ==
// per-sequence forward, graph == eager).
TEST(SmallOutLinearTest, RowsDoNotDependOnTheCall) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const int64_t rows = 4400, out = 24, in = 4096;  // two row blocks of kSmallOutRowBlock
  const auto w = random_f32(out * in, 0.02f, 5, false);
  const auto x = random_f32(rows * in, 1.0f, 6, false);
  auto dx = to_device(x);
  auto dw = to_device(w);
  DeviceBuffer<double> ws(static_cast<size_t>(small_out_linear_workspace(rows, out, in)));
  const int64_t need_all = small_out_linear_workspace(rows, out, in);
  DeviceBuffer<float> y(rows * out);
  small_out_linear(
      dx.get(), rows, in, dw.get(), false, out, in, ws.get(), need_all, y.get(), nullptr);
  const auto full = y.download();
  const std::pair<int64_t, int64_t> subs[] = {
      {0, 1}, {4399, 1}, {5, 3}, {9, 8}, {17, 13}, {100, 64}, {37, 600}, {99, 4200}};
  for (const auto& [first, n] : subs) {
    for (int rep = 0; rep < 2; ++rep) {
      DeviceBuffer<float> s(n * out);
      small_out_linear(dx.get() + first * in,
                       n,
                       in,
                       dw.get(),
                       false,
                       out,
                       in,
                       ws.get(),
                       small_out_linear_workspace(n, out, in),
                       s.get(),
                       nullptr);
      const auto got = s.download();
      EXPECT_EQ(0, std::memcmp(got.data(), full.data() + first * out, n * out * sizeof(float)))
          << first << "+" << n;
    }
  }
}

// The 16-byte staging (aligned rows: every model call) and the scalar staging (misaligned x or
// weights) stage the same values in the same places, so their outputs are the same bits; both
// kernels (≤ 32 rows, more, and from 128 rows the wide one against the fallback a misaligned x
// takes), fp32 and bf16 weights.
TEST(SmallOutLinearTest, VectorAndScalarStagingAgreeBitwise) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const int64_t out = 24, in = 16384;
  for (const int64_t rows : {1, 16, 40, 200}) {
    for (const bool bf16 : {false, true}) {
      const auto w = random_f32(out * in, 0.02f, 21 + rows, bf16);
      const auto x = random_f32(rows * in, 1.0f, 22 + rows, false);
      std::vector<float> x_shifted(x.size() + 1, 0.0f);  // the same rows one float further on
      std::copy(x.begin(), x.end(), x_shifted.begin() + 1);
      auto dx = to_device(x);
      auto dxs = to_device(x_shifted);
      auto dwf = to_device(w);
      auto dwb = to_device(to_bf16_bits(w));
      const void* dw = bf16 ? static_cast<const void*>(dwb.get()) : dwf.get();
      const int64_t need = small_out_linear_workspace(rows, out, in);
      DeviceBuffer<double> ws(static_cast<size_t>(need));
      DeviceBuffer<float> ya(rows * out), yb(rows * out);
      small_out_linear(dx.get(), rows, in, dw, bf16, out, in, ws.get(), need, ya.get(), nullptr);
      small_out_linear(dxs.get() + 1, rows, in, dw, bf16, out, in, ws.get(), need, yb.get(), nullptr);
      const auto a = ya.download(), b = yb.download();
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << rows << " rows, bf16 " << bf16;
    }
  }
}

// hc_pre_norm (partials reduced inside hc_pre, RMSNorm fused) against the three launches it
// replaces: post / comb bit-equal, x within one bf16 ulp (its sum of squares runs in another
// double order) and almost always equal; and against the CPU's hc_pre + rms_norm.
class HcPreNormTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(HcPreNormTest, MatchesTheUnfusedSteps) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const auto [D, n] = GetParam();
  const int hc = 4, M = hc * (2 + hc);
  const auto streams = random_f32(n * hc * D, 1.0f, 30 + n, true);
  cpu::HcWeights w;
  w.fn =
      cpu::Fp32Linear{.out = M, .in = hc * D, .weight = random_f32(M * hc * D, 0.01f, 31, false)};
  w.base = random_f32(M, 0.1f, 32, true);
  w.scale = {1.0f, 0.9f, 1.1f};
  const auto norm = random_f32(D, 0.1f, 33, true);
  std::vector<float> norm1(norm);
  for (float& v : norm1) v += 1.0f;
  const cpu::HcParams cp;
  std::vector<float> want(n * D), mixed(D), hp_post(hc), hp_comb(hc * hc);
  for (int t = 0; t < n; ++t) {
    cpu::hc_pre(std::span(streams).subspan(t * hc * D, hc * D), w, cp, mixed, hp_post, hp_comb);
    cpu::rms_norm(mixed, norm1, cp.norm_eps, std::span(want).subspan(t * D, D));
  }
  auto ds = to_device(streams), dfn = to_device(w.fn.weight), db = to_device(w.base),
       dsc = to_device(w.scale);
  auto dn = to_device(norm1);
  const int64_t need = small_out_linear_workspace(n, M, hc * D);
  DeviceBuffer<double> ws(static_cast<size_t>(need));
  DeviceBuffer<float> mixes(n * M), mx(n * D), x3(n * D), post3(n * hc), comb3(n * hc * hc),
      x(n * D), post(n * hc), comb(n * hc * hc);
  HcDeviceParams hp;
  hp.norm_eps = cp.norm_eps;
  small_out_linear(
      ds.get(), n, hc * D, dfn.get(), false, M, hc * D, ws.get(), need, mixes.get(), nullptr);
  hc_pre_finish(ds.get(),
                mixes.get(),
                n,
                D,
                dsc.get(),
                db.get(),
                hp,
                mx.get(),
                post3.get(),
                comb3.get(),
                nullptr);
  rms_norm_rows(mx.get(), dn.get(), n, D, cp.norm_eps, x3.get(), nullptr);
  const int64_t chunks = small_out_linear_partials(
      ds.get(), n, hc * D, dfn.get(), false, M, hc * D, ws.get(), need, nullptr);
  ASSERT_TRUE(hc_pre_norm(ds.get(),
                          ws.get(),
                          chunks,
                          n,
                          D,
                          dsc.get(),
                          db.get(),
                          hp,
                          dn.get(),
                          x.get(),
                          post.get(),
                          comb.get(),
                          nullptr));
  const auto gp = post.download(), gp3 = post3.download(), gc = comb.download(),
             gc3 = comb3.download();
  EXPECT_EQ(0, std::memcmp(gp.data(), gp3.data(), gp.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(gc.data(), gc3.data(), gc.size() * sizeof(float)));
  const auto gx = x.download(), gx3 = x3.download();
  int64_t differ = 0;
  double worst_cpu = 0;
  for (size_t i = 0; i < gx.size(); ++i) {
    if (gx[i] != gx3[i]) {
      ++differ;
      EXPECT_LE(std::fabs(gx[i] - gx3[i]), std::ldexp(std::fabs(gx3[i]), -7)) << "element " << i;
    }
    worst_cpu =
        std::max(worst_cpu,
                 std::fabs(double(gx[i]) - want[i]) / std::max(1e-30, std::fabs(double(want[i]))));
  }
  EXPECT_LE(differ, int64_t(gx.size() / 1000) + 1);
  EXPECT_LE(worst_cpu, 1.0 / 128);
  // With the Q8 output (dim % 128 == 0; otherwise refused with a clear error): x unchanged, codes
  // and scales bit-equal to quantize_q8_rows(x).
  DeviceBuffer<float> xb(n * D), postb(n * hc), combb(n * hc * hc), scales(n * D / 128), want_scales(n * D / 128);
  DeviceBuffer<uint8_t> codes(n * D), want_codes(n * D);
  if (D % 128 != 0) {
    EXPECT_THROW(hc_pre_norm(ds.get(), ws.get(), chunks, n, D, dsc.get(), db.get(), hp, dn.get(), xb.get(),
                             postb.get(), combb.get(), nullptr, codes.get(), scales.get()),
                 std::exception);
    return;
  }
  ASSERT_TRUE(hc_pre_norm(ds.get(), ws.get(), chunks, n, D, dsc.get(), db.get(), hp, dn.get(), xb.get(), postb.get(),
                          combb.get(), nullptr, codes.get(), scales.get()));
  quantize_q8_rows(xb.get(), n, D, want_codes.get(), want_scales.get(), nullptr);
  const auto gxb = xb.download();
  EXPECT_EQ(0, std::memcmp(gxb.data(), gx.data(), gx.size() * sizeof(float)));
  const auto gq = codes.download(), wq = want_codes.download();
  const auto gs = scales.download(), wsc = want_scales.download();
  EXPECT_EQ(0, std::memcmp(gq.data(), wq.data(), gq.size()));
  EXPECT_EQ(0, std::memcmp(gs.data(), wsc.data(), gs.size() * sizeof(float)));
  // A row alone (one-row calls: the register-held form, the narrow partials) gives the bits it
  // has in the whole call (above kFastTwoPassMinRows rows: the two-pass form, the MMA partials).
  for (const int64_t r : {int64_t{0}, int64_t{n} - 1}) {
    DeviceBuffer<float> x1(D), post1(hc), comb1(hc * hc);
    const int64_t need1 = small_out_linear_workspace(1, M, hc * D);
    DeviceBuffer<double> ws1(static_cast<size_t>(need1));
    const float* s1 = ds.get() + r * hc * D;
    const int64_t ch1 = small_out_linear_partials(s1, 1, hc * D, dfn.get(), false, M, hc * D, ws1.get(), need1, nullptr);
    ASSERT_TRUE(hc_pre_norm(s1, ws1.get(), ch1, 1, D, dsc.get(), db.get(), hp, dn.get(), x1.get(), post1.get(),
                            comb1.get(), nullptr));
    const auto a = x1.download(), pa = post1.download(), ca = comb1.download();
    EXPECT_EQ(0, std::memcmp(a.data(), gx.data() + r * D, D * sizeof(float))) << "row " << r;
    EXPECT_EQ(0, std::memcmp(pa.data(), gp.data() + r * hc, hc * sizeof(float))) << "row " << r;
    EXPECT_EQ(0, std::memcmp(ca.data(), gc.data() + r * hc * hc, hc * hc * sizeof(float))) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes,
                         HcPreNormTest,
                         ::testing::Values(std::tuple{256, 3},
                                           std::tuple{4096, 1},
                                           std::tuple{4096, 16},
                                           std::tuple{4096, 64},
                                           std::tuple{4096, 300},
                                           std::tuple{200, 2}));

TEST(SmallOutLinearTest, RefusesTooManyOutputsAndShortWorkspace) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer<float> x(64), y(64);
  DeviceBuffer<double> ws(4);
  EXPECT_THROW(
      small_out_linear(
          x.get(), 1, 64, x.get(), false, kSmallOutMax + 1, 64, ws.get(), 4, y.get(), nullptr),
      std::exception);
  EXPECT_THROW(
      small_out_linear(x.get(), 1, 64, x.get(), false, 8, 64, ws.get(), 4, y.get(), nullptr),
      std::exception);
}

}  // namespace
}  // namespace dsv4::gpu
