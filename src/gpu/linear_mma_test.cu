// Tests of the tensor-core lin8 / bf16 dense linears (linear_mma.cu) and the lin4 / grouped /
// multi-segment launchers against the CPU reference on fresh random inputs, and their batch
// invariance (every row count and every tile gives the same bits). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <utility>
#include <vector>

#include "cpu/linear.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "gpu/linear_fp8_case.h"
#include "gpu/linear_mma.h"
#include "gpu/ops.h"
#include "model/make_tiny.h"
#include "numerics/formats.h"
#include "numerics/quant.h"

namespace dsv4::gpu {
namespace {

// ---- Linears (tensor-core lin8 / bf16 dense, linear_mma.cu) ---------------------------------
// Contract: tolerance-equal to the CPU, bitwise batch-invariant. The GPU forms each 128-wide
// block partial by an fp32 MMA chain (Hopper's fp32 accumulate: error ≲ 2^-22·Σ|products|)
// where the CPU sums exactly, so the fp32 result differs by ~1e-6 of the row's magnitude and
// the bf16-rounded output may flip by one bf16 ulp (2^-8 relative) near a rounding boundary.
// Bound per element: |gpu − cpu| ≤ 2^-7·|cpu| + 1e-4·max_row|cpu| (the absolute term covers
// cancellation, |cpu| ≪ Σ|terms|). fp32 weights keep the double-sum kernels (1e-6 relative).
// Returns the worst ratio |gpu − cpu| / bound (≤ 1 passes).
double worst_vs_tolerance(const std::vector<float>& got,
                          const std::vector<float>& want,
                          int64_t cols) {
  double worst = 0;
  for (size_t r0 = 0; r0 < want.size(); r0 += size_t(cols)) {
    double rmax = 0;
    for (int64_t c = 0; c < cols; ++c) rmax = std::max(rmax, std::fabs(double(want[r0 + c])));
    for (int64_t c = 0; c < cols; ++c) {
      const double b = want[r0 + c], bound = std::ldexp(std::fabs(b), -7) + 1e-4 * rmax + 1e-30;
      worst = std::max(worst, std::fabs(double(got[r0 + c]) - b) / bound);
    }
  }
  return worst;
}

struct LinShape {
  int64_t rows, out, in;
};

// Rows [first, first + n) of Q8 activations (q, qs) and of their fp32 source x through lin8 (w8,
// s8) and through bf16 dense_linear (wb, no groups), rounded or not, downloaded: the sub-calls of
// the batch-invariance tests.
std::pair<std::vector<float>, std::vector<float>> lin8_and_dense_rows(const uint8_t* q, const float* qs,
                                                                      const float* x, const uint8_t* w8,
                                                                      const uint8_t* s8, const uint16_t* wb,
                                                                      int64_t first, int64_t n, int64_t out,
                                                                      int64_t in, bool round) {
  DeviceBuffer<float> y8(n * out), yd(n * out);
  lin8(q + first * in, qs + first * (in / 128), n, 1, w8, s8, out, in, nullptr, y8.get(), nullptr, round);
  dense_linear(x + first * in, n, in, wb, true, out, in, 0, round, 0.0f, yd.get(), nullptr);
  return {y8.download(), yd.download()};
}

class LinearTest : public ::testing::TestWithParam<LinShape> {};

// Lin8 within tolerance of cpu::Fp8Linear; round_out = false then bf16 (as after the TP
// all-reduce) equals the rounded output bit for bit, and the unrounded values are not all bf16.
TEST_P(LinearTest, Lin8MatchesCpuWithinTolerance) {
  SKIP_WITHOUT_GPU();
  const auto [rows, out, in] = GetParam();
  Fp8Case c(out, in, 31);
  const auto x = random_bf16(rows * in, 1.0f, 32);
  std::vector<float> want(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    c.ref.forward(std::span(x).subspan(r * in, in), std::span(want).subspan(r * out, out));
  auto dx = to_device(x);
  auto dw = to_device(c.codes), ds = to_device(c.sc);
  DeviceBuffer<uint8_t> q(rows * in);
  DeviceBuffer<float> qs(rows * in / 128), y(rows * out), yp(rows * out);
  quantize_q8_rows(dx.get(), rows, in, q.get(), qs.get(), nullptr);
  lin8(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, y.get(), nullptr);
  const auto got = y.download();
  EXPECT_LE(worst_vs_tolerance(got, want, out), 1.0);
  lin8(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, yp.get(), nullptr, false);
  const auto unrounded = yp.download();
  int64_t not_bf16 = 0;
  for (float v : unrounded) not_bf16 += numerics::round_bf16(v) != v;
  EXPECT_GT(not_bf16, 0);
  round_bf16_values(yp.get(), rows * out, nullptr);
  EXPECT_EQ(yp.download(), got);
}

TEST_P(LinearTest, Lin4MatchesCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const auto [rows, out, in] = GetParam();
  if (rows * out * in > (int64_t{1} << 28))
    GTEST_SKIP() << "general lin4 kernel: small shapes only";
  const auto wf = random_bf16(out * in, 0.05f, 3);
  std::vector<uint8_t> packed(out * in / 2), sc(out * in / 32);
  model::quantize_fp4_rows(wf.data(), out, in, packed.data(), sc.data());
  cpu::Fp4Linear ref{.out = out, .in = in};
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k)
      ref.weight.push_back(numerics::e2m1_to_float(numerics::fp4_nibble(&packed[o * in / 2], k)));
  for (uint8_t c : sc) ref.scale.push_back(numerics::e8m0_to_float(c));
  const auto x = random_bf16(rows * in, 1.0f, 4);
  std::vector<float> want(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    ref.forward(std::span(x).subspan(r * in, in), std::span(want).subspan(r * out, out));
  auto dx = to_device(x);
  auto dw = to_device(packed), ds = to_device(sc);
  DeviceBuffer<uint8_t> q(rows * in);
  DeviceBuffer<float> qs(rows * in / 128), y(rows * out);
  quantize_q8_rows(dx.get(), rows, in, q.get(), qs.get(), nullptr);
  lin4(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, y.get(), nullptr);
  EXPECT_EQ(y.download(), want);
}

// bf16 weights (tensor cores; plus post_scale) within tolerance; fp32 weights keep the double
// sum (1e-6 relative).
TEST_P(LinearTest, DenseMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const auto [rows, out, in] = GetParam();
  const auto w = random_bf16(out * in, 0.05f, 33);
  const auto x = random_bf16(rows * in, 1.0f, 34);
  cpu::Bf16Linear rb{.out = out, .in = in, .weight = w};
  cpu::Fp32Linear rf{.out = out, .in = in, .weight = w};
  const bool fp32_too = rows * out * in <= (int64_t{1} << 28);  // the fp32 general kernel is slow
  std::vector<float> want_b(rows * out), want_f(rows * out), want_s(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    rb.forward(std::span(x).subspan(r * in, in), std::span(want_b).subspan(r * out, out));
    if (fp32_too)
      rf.forward(std::span(x).subspan(r * in, in), std::span(want_f).subspan(r * out, out));
  }
  const float post = 0.375f;
  for (size_t i = 0; i < want_b.size(); ++i) want_s[i] = numerics::round_bf16(want_b[i] * post);
  const std::vector<uint16_t> bits = to_bf16_bits(w);
  auto dx = to_device(x);
  auto dwb = to_device(bits);
  auto dwf = to_device(w);
  DeviceBuffer<float> yb(rows * out), yf(rows * out), ys(rows * out);
  dense_linear(dx.get(), rows, in, dwb.get(), true, out, in, 0, true, 0.0f, yb.get(), nullptr);
  dense_linear(dx.get(), rows, in, dwb.get(), true, out, in, 0, true, post, ys.get(), nullptr);
  EXPECT_LE(worst_vs_tolerance(yb.download(), want_b, out), 1.0);
  EXPECT_LE(worst_vs_tolerance(ys.download(), want_s, out), 1.0);
  if (fp32_too) {
    dense_linear(dx.get(), rows, in, dwf.get(), false, out, in, 0, false, 0.0f, yf.get(), nullptr);
    EXPECT_LE(max_rel(yf.download(), want_f), 1e-6);
  }
}

// M ∈ {1, 3, 8, 16, 64, 65, 300, 2048} at Flash TP2 projection shapes and odd sizes (out not a
// multiple of 16, K = 384 / 7168 / 16384).
INSTANTIATE_TEST_SUITE_P(Shapes,
                         LinearTest,
                         ::testing::Values(LinShape{1, 128, 128},
                                           LinShape{3, 200, 384},
                                           LinShape{5, 256, 1024},
                                           LinShape{2, 64, 2048},
                                           LinShape{1, 1024, 4096},
                                           LinShape{3, 1024, 4096},
                                           LinShape{8, 4096, 1024},
                                           LinShape{16, 512, 4096},
                                           LinShape{64, 1024, 4096},
                                           LinShape{1, 4096, 1024},
                                           LinShape{16, 4096, 1024},
                                           LinShape{1, 200, 7168},
                                           LinShape{3, 72, 7168},
                                           LinShape{64, 130, 384},
                                           LinShape{65, 130, 384},
                                           LinShape{300, 512, 4096},
                                           LinShape{2048, 256, 1024},
                                           LinShape{2, 24, 16384},
                                           LinShape{1, 4, 16384}));

// Batch invariance (GpuModel relies on it: batched decode == per-sequence forward, graph ==
// eager, prefill chunking): a row's output is the same bits whether it is computed alone, in a
// short call, or at another position of a long call (other tile, other launch configuration).
TEST(LinearBatchInvarianceTest, RowsDoNotDependOnTheCall) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 300, out = 1040, in = 1024, G = 4, opg = out / G;
  Fp8Case c(out, in, 41);
  const auto wb = random_bf16(out * in, 0.05f, 42);
  const std::vector<uint16_t> bits = to_bf16_bits(wb);
  const auto x = random_bf16(rows * G * in, 1.0f, 43);
  auto dx = to_device(x), dxg = to_device(x);
  auto dw = to_device(c.codes), ds = to_device(c.sc);
  auto dwb = to_device(bits);
  DeviceBuffer<uint8_t> q(rows * in);
  DeviceBuffer<float> qs(rows * in / 128), y(rows * out), yd(rows * out), yg(rows * out);
  quantize_q8_rows(dx.get(), rows, in, q.get(), qs.get(), nullptr);
  // Full calls: lin8 and dense over x as [rows, in]; grouped dense over x as [rows/G, G·in].
  lin8(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, y.get(), nullptr, false);
  dense_linear(dx.get(), rows, in, dwb.get(), true, out, in, 0, false, 0.0f, yd.get(), nullptr);
  dense_linear(
      dxg.get(), rows / G, G * in, dwb.get(), true, out, in, opg, true, 0.0f, yg.get(), nullptr);
  const auto full8 = y.download(), fulld = yd.download(), fullg = yg.download();
  // Sub-calls [first, first + n): sizes that take every tile configuration, rows at new offsets.
  const std::pair<int64_t, int64_t> subs[] = {{0, 1},
                                              {7, 1},
                                              {299, 1},
                                              {5, 3},
                                              {9, 8},
                                              {17, 13},
                                              {33, 16},
                                              {40, 29},
                                              {3, 64},
                                              {100, 65},
                                              {37, 263}};
  for (const auto& [first, n] : subs) {
    const auto [g8, gd] =
        lin8_and_dense_rows(q.get(), qs.get(), dx.get(), dw.get(), ds.get(), dwb.get(), first, n, out, in, false);
    EXPECT_EQ(0, std::memcmp(g8.data(), full8.data() + first * out, n * out * sizeof(float)))
        << "lin8 " << first << "+" << n;
    EXPECT_EQ(0, std::memcmp(gd.data(), fulld.data() + first * out, n * out * sizeof(float)))
        << "dense " << first << "+" << n;
    if (first + n <= rows / G) {
      DeviceBuffer<float> sg(n * out);
      dense_linear(dxg.get() + first * G * in,
                   n,
                   G * in,
                   dwb.get(),
                   true,
                   out,
                   in,
                   opg,
                   true,
                   0.0f,
                   sg.get(),
                   nullptr);
      const auto gg = sg.download();
      EXPECT_EQ(0, std::memcmp(gg.data(), fullg.data() + first * out, n * out * sizeof(float)))
          << "grouped " << first << "+" << n;
    }
  }
}

// Every tile configuration of the tensor-core kernels (linear_mma.h force_tile) gives the same
// bits as the one chosen by rows: lin8, dense with bf16-valued and with fp32 activations (the lo
// half), grouped dense (wo_a) and dense_linear_multi, at row counts with partial n-fragments and
// out with partial m-tiles.
TEST(LinearBatchInvarianceTest, EveryTileGivesTheSameBits) {
  SKIP_WITHOUT_GPU();
  const int64_t out = 1040, in = 1024, G = 4, gout = 1024, opg = gout / G;
  Fp8Case c(out, in, 91);
  const std::vector<uint16_t> bits = to_bf16_bits(random_bf16(out * in, 0.05f, 92));
  auto dw = to_device(c.codes), ds = to_device(c.sc);
  auto dwb = to_device(bits);
  for (const int64_t rows : {3, 13, 70}) {
    const auto xb = random_bf16(rows * G * in, 1.0f, 93 + rows);
    std::vector<float> xf(rows * in);
    std::mt19937_64 rng(94);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (float& v : xf) v = d(rng);  // full fp32 mantissas: the lo MMAs run
    auto dxb = to_device(xb), dxf = to_device(xf);
    DeviceBuffer<uint8_t> q(rows * in);
    DeviceBuffer<float> qs(rows * in / 128);
    quantize_q8_rows(dxb.get(), rows, in, q.get(), qs.get(), nullptr);
    // One result per call kind: lin8, dense bf16 x, dense fp32 x, grouped, multi (two outputs).
    auto run_all = [&]() {
      std::vector<DeviceBuffer<float>> y;
      for (int64_t n : {out, out, out, gout, out, int64_t{200}}) y.emplace_back(rows * n);
      lin8(q.get(),
           qs.get(),
           rows,
           1,
           dw.get(),
           ds.get(),
           out,
           in,
           nullptr,
           y[0].get(),
           nullptr,
           false);
      dense_linear(
          dxb.get(), rows, in, dwb.get(), true, out, in, 0, true, 0.0f, y[1].get(), nullptr);
      dense_linear(
          dxf.get(), rows, in, dwb.get(), true, out, in, 0, false, 0.0f, y[2].get(), nullptr);
      dense_linear(
          dxb.get(), rows, G * in, dwb.get(), true, gout, in, opg, true, 0.0f, y[3].get(), nullptr);
      const DenseOut outs[2] = {{.w = dwb.get(), .out = out, .y = y[4].get()},
                                {.w = dwb.get() + 100 * in,
                                 .out = 200,
                                 .y = y[5].get(),
                                 .round_bf16 = true,
                                 .post_scale = 0.25f}};
      dense_linear_multi(dxf.get(), rows, in, std::span<const DenseOut>(outs, 2), nullptr);
      std::vector<std::vector<float>> h;
      for (auto& b : y) h.push_back(b.download());
      return h;
    };
    mma::force_tile(-1);
    const auto want = run_all();
    for (int t = 0; t < mma::tile_count(); ++t) {
      mma::force_tile(t);
      const auto got = run_all();
      for (size_t k = 0; k < want.size(); ++k)
        EXPECT_EQ(0, std::memcmp(got[k].data(), want[k].data(), want[k].size() * sizeof(float)))
            << "rows " << rows << " tile " << t << " call " << k;
    }
    mma::force_tile(-1);
  }
}

// The small-out K = 4096 decode shapes (weights_proj, gate, compressors; out 200: a partial
// tile): rows of M = 1..16 calls equal the same rows of a 40-row call bit for bit, twice in a
// row (guards any split-K / workspace scheme for these shapes; docs/decode-linears.md).
TEST(LinearBatchInvarianceTest, SmallOutShapesDoNotDependOnTheCall) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 40, in = 4096;
  for (const int64_t out : {int64_t{64}, int64_t{200}, int64_t{256}, int64_t{512}, int64_t{1024}}) {
    Fp8Case c(out, in, 51);
    const auto wb = random_bf16(out * in, 0.05f, 52);
    const std::vector<uint16_t> bits = to_bf16_bits(wb);
    const auto x = random_bf16(rows * in, 1.0f, 53);
    auto dx = to_device(x);
    auto dw = to_device(c.codes), ds = to_device(c.sc);
    auto dwb = to_device(bits);
    DeviceBuffer<uint8_t> q(rows * in);
    DeviceBuffer<float> qs(rows * in / 128), y(rows * out), yd(rows * out);
    quantize_q8_rows(dx.get(), rows, in, q.get(), qs.get(), nullptr);
    lin8(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, y.get(), nullptr, true);
    dense_linear(dx.get(), rows, in, dwb.get(), true, out, in, 0, true, 0.0f, yd.get(), nullptr);
    const auto full8 = y.download(), fulld = yd.download();
    const std::pair<int64_t, int64_t> subs[] = {
        {0, 1}, {39, 1}, {3, 5}, {11, 8}, {20, 9}, {24, 16}};
    for (const auto& [first, n] : subs) {
      for (int rep = 0; rep < 2; ++rep) {
        const auto [g8, gd] =
            lin8_and_dense_rows(q.get(), qs.get(), dx.get(), dw.get(), ds.get(), dwb.get(), first, n, out, in, true);
        EXPECT_EQ(0, std::memcmp(g8.data(), full8.data() + first * out, n * out * sizeof(float)))
            << "lin8 out=" << out << " " << first << "+" << n << " rep " << rep;
        EXPECT_EQ(0, std::memcmp(gd.data(), fulld.data() + first * out, n * out * sizeof(float)))
            << "dense out=" << out << " " << first << "+" << n << " rep " << rep;
      }
    }
  }
}

// dense_linear_multi (the decode step's compressor + indexer projections in one launch): every
// output equals its own dense_linear call bit for bit, at decode and prefill row counts, with
// rounding / post-scale per output and outputs that are not multiples of 16 or 32.
TEST(DenseMultiTest, EqualsOneCallPerOutput) {
  SKIP_WITHOUT_GPU();
  const int64_t in = 4096;
  const int64_t outs_n[] = {1024, 1024, 256, 200, 64};
  std::vector<DeviceBuffer<uint16_t>> ws;
  for (int j = 0; j < 5; ++j) {
    const std::vector<uint16_t> bits = to_bf16_bits(random_bf16(outs_n[j] * in, 0.05f, 60 + j));
    ws.push_back(to_device(bits));
  }
  for (const int64_t rows : {1, 5, 16, 33, 64, 300}) {
    auto dx = to_device(random_bf16(rows * in, 1.0f, 70 + rows));
    std::vector<DeviceBuffer<float>> ym, ys;
    DenseOut outs[5];
    for (int j = 0; j < 5; ++j) {
      ym.emplace_back(rows * outs_n[j]);
      ys.emplace_back(rows * outs_n[j]);
      outs[j] = {.w = ws[j].get(),
                 .w_bf16 = true,
                 .out = outs_n[j],
                 .y = ym[j].get(),
                 .round_bf16 = j >= 3,
                 .post_scale = j == 4 ? 0.0884f : 0.0f};
      dense_linear(dx.get(),
                   rows,
                   in,
                   ws[j].get(),
                   true,
                   outs_n[j],
                   in,
                   0,
                   outs[j].round_bf16,
                   outs[j].post_scale,
                   ys[j].get(),
                   nullptr);
    }
    dense_linear_multi(dx.get(), rows, in, std::span<const DenseOut>(outs, 5), nullptr);
    for (int j = 0; j < 5; ++j) {
      const auto a = ym[j].download(), b = ys[j].download();
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << "rows " << rows << " output " << j;
    }
  }
}

// lin8_multi (the decode step's wq_a + wkv in one launch): every output equals its own lin8 call
// bit for bit, at decode and prefill row counts, rounded and unrounded, with outputs that are not
// multiples of 16 or 128 (partial m-tiles and scale blocks).
TEST(Lin8MultiTest, EqualsOneCallPerOutput) {
  SKIP_WITHOUT_GPU();
  const int64_t in = 4096;
  const int64_t outs_n[] = {1024, 512, 200, 72};
  std::vector<Fp8Case> cases;
  std::vector<DeviceBuffer<uint8_t>> dw, ds;
  for (int j = 0; j < 4; ++j) {
    cases.emplace_back(outs_n[j], in, 50 + j);
    dw.push_back(to_device(cases.back().codes));
    ds.push_back(to_device(cases.back().sc));
  }
  for (const int64_t rows : {1, 5, 16, 33, 64, 300}) {
    auto dx = to_device(random_bf16(rows * in, 1.0f, 75 + rows));
    DeviceBuffer<uint8_t> q(rows * in);
    DeviceBuffer<float> qs(rows * in / 128);
    quantize_q8_rows(dx.get(), rows, in, q.get(), qs.get(), nullptr);
    std::vector<DeviceBuffer<float>> ym, ys;
    Lin8Out outs[4];
    for (int j = 0; j < 4; ++j) {
      ym.emplace_back(rows * outs_n[j]);
      ys.emplace_back(rows * outs_n[j]);
      outs[j] = {.w = dw[j].get(), .ws = ds[j].get(), .out = outs_n[j], .y = ym[j].get(), .round_out = j != 1};
      lin8(q.get(), qs.get(), rows, 1, dw[j].get(), ds[j].get(), outs_n[j], in, nullptr, ys[j].get(), nullptr,
           outs[j].round_out);
    }
    lin8_multi(q.get(), qs.get(), rows, in, std::span<const Lin8Out>(outs, 4), nullptr);
    for (int j = 0; j < 4; ++j) {
      const auto a = ym[j].download(), b = ys[j].download();
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "rows " << rows << " output " << j;
    }
  }
}

// Activations that are not bf16 values take the bf16 hi + lo split (two MMAs per step; bf16-valued
// ones skip the zero lo half): the result stays within 2^-16 of the row's magnitude of the exact
// sum.
TEST(DenseMultiTest, Fp32ActivationsKeepTheLowHalf) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 3, out = 96, in = 1024;
  const auto w = random_bf16(out * in, 0.05f, 81);
  std::vector<float> x(rows * in);
  std::mt19937_64 rng(82);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& v : x) v = d(rng);  // full fp32 mantissas
  cpu::Fp32Linear ref{.out = out, .in = in, .weight = w};
  std::vector<float> want(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    ref.forward(std::span(x).subspan(r * in, in), std::span(want).subspan(r * out, out));
  const std::vector<uint16_t> bits = to_bf16_bits(w);
  auto dx = to_device(x);
  auto dw = to_device(bits);
  DeviceBuffer<float> y(rows * out);
  dense_linear(dx.get(), rows, in, dw.get(), true, out, in, 0, false, 0.0f, y.get(), nullptr);
  const auto got = y.download();
  double rmax = 0, worst = 0;
  for (float v : want) rmax = std::max(rmax, std::fabs(double(v)));
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  EXPECT_LE(worst, std::ldexp(rmax, -16)) << "max |gpu - cpu| " << worst << " of row max " << rmax;
}

// Grouped bf16 linear (wo_a): output row o reads x[(o / opg)·in, ...) of a row of G·in values.
TEST(GroupedDenseTest, MatchesCpuWithinTolerance) {
  SKIP_WITHOUT_GPU();
  for (const int64_t rows : {1, 3, 16, 64, 300}) {
    const int64_t G = 4, opg = 256, in = 1024, out = G * opg;
    const auto w = random_bf16(out * in, 0.05f, 35);
    const auto x = random_bf16(rows * G * in, 1.0f, 36);
    std::vector<float> want(rows * out);
    for (int64_t g = 0; g < G; ++g) {
      cpu::Bf16Linear rb{
          .out = opg,
          .in = in,
          .weight = std::vector<float>(w.begin() + g * opg * in, w.begin() + (g + 1) * opg * in)};
      std::vector<float> yg(opg);
      for (int64_t r = 0; r < rows; ++r) {
        rb.forward(std::span(x).subspan((r * G + g) * in, in), yg);
        for (int64_t o = 0; o < opg; ++o) want[r * out + g * opg + o] = yg[o];
      }
    }
    const std::vector<uint16_t> bits = to_bf16_bits(w);
    auto dx = to_device(x);
    auto dw = to_device(bits);
    DeviceBuffer<float> y(rows * out);
    dense_linear(
        dx.get(), rows, G * in, dw.get(), true, out, in, opg, true, 0.0f, y.get(), nullptr);
    // Grouped rows are compared per group's opg outputs (the tolerance's row scale).
    EXPECT_LE(worst_vs_tolerance(y.download(), want, opg), 1.0) << "rows " << rows;
  }
}

// Weightless bf16 head RMS (cpu attention.cpp head_rms_bf16, restated here: it is internal).

}  // namespace
}  // namespace dsv4::gpu
