// Per-kernel tests: every GPU kernel against the CPU reference function on fresh random
// inputs, parameterized over sizes. Skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "cpu/linear.h"
#include "cpu/mhc.h"
#include "gpu/cuda_check.h"
#include "gpu/kv_fp8.h"
#include "gpu/linear_mma.h"
#include "gpu/ops.h"
#include "model/make_tiny.h"
#include "numerics/formats.h"
#include "numerics/hadamard.h"
#include "numerics/quant.h"
#include "numerics/rope.h"

namespace dsv4::gpu {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device"

std::vector<float> random_bf16(size_t n, float std, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = numerics::round_bf16(d(rng));
  return v;
}

// Max |a−b| / max(|b|, tiny) over the arrays.
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]) / std::max(1e-30, std::fabs(double(b[i]))));
  return m;
}

// ---- Linears (tensor-core lin8 / bf16 dense, linear_mma.cu) ---------------------------------
// Contract: tolerance-equal to the CPU, bitwise batch-invariant. The GPU forms each 128-wide
// block partial by an fp32 MMA chain (Hopper's fp32 accumulate: error ≲ 2^-22·Σ|products|)
// where the CPU sums exactly, so the fp32 result differs by ~1e-6 of the row's magnitude and
// the bf16-rounded output may flip by one bf16 ulp (2^-8 relative) near a rounding boundary.
// Bound per element: |gpu − cpu| ≤ 2^-7·|cpu| + 1e-4·max_row|cpu| (the absolute term covers
// cancellation, |cpu| ≪ Σ|terms|). fp32 weights keep the double-sum kernels (1e-6 relative).
// Returns the worst ratio |gpu − cpu| / bound (≤ 1 passes).
double worst_vs_tolerance(const std::vector<float>& got, const std::vector<float>& want, int64_t cols) {
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

struct Fp8Case {  // random bf16 weights quantized to FP8 blocks (block scales spread), CPU reference
  std::vector<uint8_t> codes, sc;
  cpu::Fp8Linear ref;
  Fp8Case(int64_t out, int64_t in, uint64_t seed) : ref{.out = out, .in = in} {
    const auto wf = random_bf16(out * in, 0.05f, seed);
    codes.resize(out * in);
    sc.resize(((out + 127) / 128) * ((in + 127) / 128));
    model::quantize_fp8_blocks(wf.data(), out, in, codes.data(), sc.data());
    for (size_t i = 0; i < sc.size(); ++i) sc[i] = uint8_t(sc[i] + int(i % 5) - 2);  // order-sensitive sums
    for (uint8_t c : codes) ref.weight.push_back(numerics::e4m3_to_float(c));
    for (uint8_t c : sc) ref.scale.push_back(numerics::e8m0_to_float(c));
  }
};

class LinearTest : public ::testing::TestWithParam<LinShape> {};

// Lin8 within tolerance of cpu::Fp8Linear; round_out = false then bf16 (as after the TP
// all-reduce) equals the rounded output bit for bit, and the unrounded values are not all bf16.
TEST_P(LinearTest, Lin8MatchesCpuWithinTolerance) {
  SKIP_WITHOUT_GPU();
  const auto [rows, out, in] = GetParam();
  Fp8Case c(out, in, 31);
  const auto x = random_bf16(rows * in, 1.0f, 32);
  std::vector<float> want(rows * out);
  for (int64_t r = 0; r < rows; ++r) c.ref.forward(std::span(x).subspan(r * in, in), std::span(want).subspan(r * out, out));
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
  if (rows * out * in > (int64_t{1} << 28)) GTEST_SKIP() << "general lin4 kernel: small shapes only";
  const auto wf = random_bf16(out * in, 0.05f, 3);
  std::vector<uint8_t> packed(out * in / 2), sc(out * in / 32);
  model::quantize_fp4_rows(wf.data(), out, in, packed.data(), sc.data());
  cpu::Fp4Linear ref{.out = out, .in = in};
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) ref.weight.push_back(numerics::e2m1_to_float(numerics::fp4_nibble(&packed[o * in / 2], k)));
  for (uint8_t c : sc) ref.scale.push_back(numerics::e8m0_to_float(c));
  const auto x = random_bf16(rows * in, 1.0f, 4);
  std::vector<float> want(rows * out);
  for (int64_t r = 0; r < rows; ++r) ref.forward(std::span(x).subspan(r * in, in), std::span(want).subspan(r * out, out));
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
    if (fp32_too) rf.forward(std::span(x).subspan(r * in, in), std::span(want_f).subspan(r * out, out));
  }
  const float post = 0.375f;
  for (size_t i = 0; i < want_b.size(); ++i) want_s[i] = numerics::round_bf16(want_b[i] * post);
  std::vector<uint16_t> bits;
  for (float v : w) bits.push_back(numerics::float_to_bf16_bits(v));
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
INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearTest,
    ::testing::Values(LinShape{1, 128, 128}, LinShape{3, 200, 384}, LinShape{5, 256, 1024}, LinShape{2, 64, 2048},
                      LinShape{1, 1024, 4096}, LinShape{3, 1024, 4096}, LinShape{8, 4096, 1024},
                      LinShape{16, 512, 4096}, LinShape{64, 1024, 4096}, LinShape{1, 4096, 1024},
                      LinShape{16, 4096, 1024}, LinShape{1, 200, 7168}, LinShape{3, 72, 7168},
                      LinShape{64, 130, 384}, LinShape{65, 130, 384}, LinShape{300, 512, 4096},
                      LinShape{2048, 256, 1024}, LinShape{2, 24, 16384}, LinShape{1, 4, 16384}));

// Batch invariance (GpuModel relies on it: batched decode == per-sequence forward, graph ==
// eager, prefill chunking): a row's output is the same bits whether it is computed alone, in a
// short call, or at another position of a long call (other tile, other launch configuration).
TEST(LinearBatchInvarianceTest, RowsDoNotDependOnTheCall) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 300, out = 1040, in = 1024, G = 4, opg = out / G;
  Fp8Case c(out, in, 41);
  const auto wb = random_bf16(out * in, 0.05f, 42);
  std::vector<uint16_t> bits;
  for (float v : wb) bits.push_back(numerics::float_to_bf16_bits(v));
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
  dense_linear(dxg.get(), rows / G, G * in, dwb.get(), true, out, in, opg, true, 0.0f, yg.get(), nullptr);
  const auto full8 = y.download(), fulld = yd.download(), fullg = yg.download();
  // Sub-calls [first, first + n): sizes that take every tile configuration, rows at new offsets.
  const std::pair<int64_t, int64_t> subs[] = {{0, 1}, {7, 1}, {299, 1}, {5, 3}, {9, 8}, {17, 13}, {33, 16},
                                              {40, 29}, {3, 64}, {100, 65}, {37, 263}};
  for (const auto& [first, n] : subs) {
    DeviceBuffer<float> s8(n * out), sd(n * out);
    lin8(q.get() + first * in, qs.get() + first * (in / 128), n, 1, dw.get(), ds.get(), out, in, nullptr, s8.get(),
         nullptr, false);
    dense_linear(dx.get() + first * in, n, in, dwb.get(), true, out, in, 0, false, 0.0f, sd.get(), nullptr);
    const auto g8 = s8.download(), gd = sd.download();
    EXPECT_EQ(0, std::memcmp(g8.data(), full8.data() + first * out, n * out * sizeof(float))) << "lin8 " << first << "+" << n;
    EXPECT_EQ(0, std::memcmp(gd.data(), fulld.data() + first * out, n * out * sizeof(float))) << "dense " << first << "+" << n;
    if (first + n <= rows / G) {
      DeviceBuffer<float> sg(n * out);
      dense_linear(dxg.get() + first * G * in, n, G * in, dwb.get(), true, out, in, opg, true, 0.0f, sg.get(), nullptr);
      const auto gg = sg.download();
      EXPECT_EQ(0, std::memcmp(gg.data(), fullg.data() + first * out, n * out * sizeof(float))) << "grouped " << first << "+" << n;
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
  std::vector<uint16_t> bits;
  for (float v : random_bf16(out * in, 0.05f, 92)) bits.push_back(numerics::float_to_bf16_bits(v));
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
      lin8(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, y[0].get(), nullptr, false);
      dense_linear(dxb.get(), rows, in, dwb.get(), true, out, in, 0, true, 0.0f, y[1].get(), nullptr);
      dense_linear(dxf.get(), rows, in, dwb.get(), true, out, in, 0, false, 0.0f, y[2].get(), nullptr);
      dense_linear(dxb.get(), rows, G * in, dwb.get(), true, gout, in, opg, true, 0.0f, y[3].get(), nullptr);
      const DenseOut outs[2] = {{.w = dwb.get(), .out = out, .y = y[4].get()},
                                {.w = dwb.get() + 100 * in, .out = 200, .y = y[5].get(), .round_bf16 = true,
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
    std::vector<uint16_t> bits;
    for (float v : wb) bits.push_back(numerics::float_to_bf16_bits(v));
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
    const std::pair<int64_t, int64_t> subs[] = {{0, 1}, {39, 1}, {3, 5}, {11, 8}, {20, 9}, {24, 16}};
    for (const auto& [first, n] : subs) {
      for (int rep = 0; rep < 2; ++rep) {
        DeviceBuffer<float> s8(n * out), sd(n * out);
        lin8(q.get() + first * in, qs.get() + first * (in / 128), n, 1, dw.get(), ds.get(), out, in, nullptr, s8.get(),
             nullptr, true);
        dense_linear(dx.get() + first * in, n, in, dwb.get(), true, out, in, 0, true, 0.0f, sd.get(), nullptr);
        const auto g8 = s8.download(), gd = sd.download();
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
    std::vector<uint16_t> bits;
    for (float v : random_bf16(outs_n[j] * in, 0.05f, 60 + j)) bits.push_back(numerics::float_to_bf16_bits(v));
    ws.push_back(to_device(bits));
  }
  for (const int64_t rows : {1, 5, 16, 33, 64, 300}) {
    auto dx = to_device(random_bf16(rows * in, 1.0f, 70 + rows));
    std::vector<DeviceBuffer<float>> ym, ys;
    DenseOut outs[5];
    for (int j = 0; j < 5; ++j) {
      ym.emplace_back(rows * outs_n[j]);
      ys.emplace_back(rows * outs_n[j]);
      outs[j] = {.w = ws[j].get(), .w_bf16 = true, .out = outs_n[j], .y = ym[j].get(), .round_bf16 = j >= 3,
                 .post_scale = j == 4 ? 0.0884f : 0.0f};
      dense_linear(dx.get(), rows, in, ws[j].get(), true, outs_n[j], in, 0, outs[j].round_bf16, outs[j].post_scale,
                   ys[j].get(), nullptr);
    }
    dense_linear_multi(dx.get(), rows, in, std::span<const DenseOut>(outs, 5), nullptr);
    for (int j = 0; j < 5; ++j) {
      const auto a = ym[j].download(), b = ys[j].download();
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "rows " << rows << " output " << j;
    }
  }
}

// Activations that are not bf16 values take the bf16 hi + lo split (two MMAs per step; bf16-valued
// ones skip the zero lo half): the result stays within 2^-16 of the row's magnitude of the exact sum.
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
  for (int64_t r = 0; r < rows; ++r) ref.forward(std::span(x).subspan(r * in, in), std::span(want).subspan(r * out, out));
  std::vector<uint16_t> bits;
  for (float v : w) bits.push_back(numerics::float_to_bf16_bits(v));
  auto dx = to_device(x);
  auto dw = to_device(bits);
  DeviceBuffer<float> y(rows * out);
  dense_linear(dx.get(), rows, in, dw.get(), true, out, in, 0, false, 0.0f, y.get(), nullptr);
  const auto got = y.download();
  double rmax = 0, worst = 0;
  for (float v : want) rmax = std::max(rmax, std::fabs(double(v)));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
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
      cpu::Bf16Linear rb{.out = opg, .in = in,
                         .weight = std::vector<float>(w.begin() + g * opg * in, w.begin() + (g + 1) * opg * in)};
      std::vector<float> yg(opg);
      for (int64_t r = 0; r < rows; ++r) {
        rb.forward(std::span(x).subspan((r * G + g) * in, in), yg);
        for (int64_t o = 0; o < opg; ++o) want[r * out + g * opg + o] = yg[o];
      }
    }
    std::vector<uint16_t> bits;
    for (float v : w) bits.push_back(numerics::float_to_bf16_bits(v));
    auto dx = to_device(x);
    auto dw = to_device(bits);
    DeviceBuffer<float> y(rows * out);
    dense_linear(dx.get(), rows, G * in, dw.get(), true, out, in, opg, true, 0.0f, y.get(), nullptr);
    // Grouped rows are compared per group's opg outputs (the tolerance's row scale).
    EXPECT_LE(worst_vs_tolerance(y.download(), want, opg), 1.0) << "rows " << rows;
  }
}

// Weightless bf16 head RMS (cpu attention.cpp head_rms_bf16, restated here: it is internal).
TEST(HeadRmsTest, MatchesReferenceBitForBit) {
  SKIP_WITHOUT_GPU();
  for (const int len : {512, 128, 100}) {
    const int64_t rows = 67;
    auto x = random_bf16(rows * len, 1.5f, 40 + len);
    std::vector<float> want = x;
    for (int64_t r = 0; r < rows; ++r) {
      float* q = want.data() + r * len;
      float sum = 0.0f;
      for (int i = 0; i < len; ++i) sum += numerics::round_bf16(q[i] * q[i]);
      const float mean = numerics::round_bf16(sum / float(len));
      const float rs = numerics::round_bf16(1.0f / std::sqrt(numerics::round_bf16(mean + 1e-6f)));
      for (int i = 0; i < len; ++i) q[i] = numerics::round_bf16(q[i] * rs);
    }
    auto dx = to_device(x);
    head_rms_bf16_rows(dx.get(), rows, len, 1e-6f, nullptr);
    EXPECT_EQ(dx.download(), want) << "len " << len;
  }
}

TEST(RmsNormWideTest, MatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const int64_t dim : {4096, 7168, 1000}) {
    const int64_t rows = 17;
    const auto x = random_bf16(rows * dim, 2.0f, 50);
    auto w = random_bf16(dim, 0.1f, 51);
    for (float& v : w) v = numerics::round_bf16(v + 1.0f);
    std::vector<float> want(rows * dim);
    for (int64_t r = 0; r < rows; ++r)
      cpu::rms_norm(std::span(x).subspan(r * dim, dim), w, 1e-6f, std::span(want).subspan(r * dim, dim));
    auto dx = to_device(x), dw = to_device(w);
    DeviceBuffer<float> y(rows * dim);
    rms_norm_rows(dx.get(), dw.get(), rows, dim, 1e-6f, y.get(), nullptr);
    EXPECT_LE(max_rel(y.download(), want), 1.0 / 128) << "dim " << dim;
  }
}

class RowTest : public ::testing::TestWithParam<int> {};

TEST_P(RowTest, RmsNormMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int dim = GetParam(), rows = 7;
  const auto x = random_bf16(rows * dim, 2.0f, 7);
  auto w = random_bf16(dim, 0.1f, 8);
  for (float& v : w) v = numerics::round_bf16(v + 1.0f);
  std::vector<float> want(rows * dim);
  for (int r = 0; r < rows; ++r) cpu::rms_norm(std::span(x).subspan(r * dim, dim), w, 1e-6f, std::span(want).subspan(r * dim, dim));
  auto dx = to_device(x), dw = to_device(w);
  DeviceBuffer<float> y(rows * dim);
  rms_norm_rows(dx.get(), dw.get(), rows, dim, 1e-6f, y.get(), nullptr);
  EXPECT_LE(max_rel(y.download(), want), 1.0 / 128);  // at most one bf16 step, normally equal
}

TEST_P(RowTest, QuantizeAndSimulateMatchNumerics) {
  SKIP_WITHOUT_GPU();
  const int dim = GetParam(), rows = 5;
  auto x = random_bf16(rows * dim, 3.0f, 9);
  x[3] = 0.0f;
  x[5] = 1e-7f;
  std::vector<uint8_t> codes(rows * dim);
  std::vector<float> scales(rows * dim / 128);
  numerics::quantize_q8(x, 128, codes, scales);
  auto dx = to_device(x);
  DeviceBuffer<uint8_t> q(rows * dim);
  DeviceBuffer<float> qs(rows * dim / 128);
  quantize_q8_rows(dx.get(), rows, dim, q.get(), qs.get(), nullptr);
  EXPECT_EQ(q.download(), codes);
  EXPECT_EQ(qs.download(), scales);
  auto w8 = x, w4 = x;
  numerics::simulate_q8(w8, 64);
  numerics::simulate_q4(w4, 32);
  auto d8 = to_device(x), d4 = to_device(x);
  simulate_q8_rows(d8.get(), rows, dim, dim, 64, nullptr);
  simulate_q4_rows(d4.get(), rows, dim, dim, 32, nullptr);
  EXPECT_EQ(d8.download(), w8);
  EXPECT_EQ(d4.download(), w4);
}

// The model's decode shape: 2 rows of 448 values in rows of stride 512 (the tail is untouched).
TEST(SimulateTest, StridedRowsMatchNumerics) {
  SKIP_WITHOUT_GPU();
  const int rows = 2, stride = 512, len = 448;
  const auto x = random_bf16(rows * stride, 2.0f, 19);
  auto w8 = x, w4 = x;
  for (int r = 0; r < rows; ++r) {
    numerics::simulate_q8(std::span(w8).subspan(r * stride, len), 64);
    numerics::simulate_q4(std::span(w4).subspan(r * stride, len), 32);
  }
  auto d8 = to_device(x), d4 = to_device(x);
  simulate_q8_rows(d8.get(), rows, stride, len, 64, nullptr);
  simulate_q4_rows(d4.get(), rows, stride, len, 32, nullptr);
  EXPECT_EQ(d8.download(), w8);
  EXPECT_EQ(d4.download(), w4);
}

TEST_P(RowTest, HadamardAndRopeMatchNumerics) {
  SKIP_WITHOUT_GPU();
  const int dim = GetParam(), rows = 4;
  auto x = random_bf16(rows * dim, 1.0f, 10);
  auto want = x;
  for (int r = 0; r < rows; ++r) numerics::hadamard_bf16(std::span(want).subspan(r * dim, dim));
  auto dx = to_device(x);
  hadamard_rows(dx.get(), rows, dim, nullptr);
  EXPECT_EQ(dx.download(), want);

  numerics::RopeParams p{.rope_dim = 64, .base = 160000, .yarn = true, .factor = 16, .original_seq_len = 65536};
  const int64_t max_pos = 5000;
  numerics::RopeTable table(p, max_pos);
  std::vector<float> tab(max_pos * 32 * 2);
  for (int64_t pos = 0; pos < max_pos; ++pos)
    for (int i = 0; i < 32; ++i) {
      tab[(pos * 32 + i) * 2] = table.cos(pos, i);
      tab[(pos * 32 + i) * 2 + 1] = table.sin(pos, i);
    }
  auto dt = to_device(tab);
  for (bool inverse : {false, true}) {
    auto r = x;
    for (int i = 0; i < rows; ++i) table.apply(std::span(r).subspan(i * dim, dim), 4000 + 7 * i, inverse);
    auto dr = to_device(x);
    rope_rows(dr.get(), rows, dim, 1, 4000, 7, dt.get(), 32, inverse, nullptr);
    EXPECT_EQ(dr.download(), r) << "inverse " << inverse;
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, RowTest, ::testing::Values(128, 512, 1024));

// Q8-simulates rows [n, 512] in place (what the model caches) and returns their FP8 cache
// image (kv_fp8.h), which holds exactly these values.
std::vector<uint8_t> fp8_cache(std::vector<float>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size()) / kKvDim;
  std::vector<uint8_t> c(static_cast<size_t>(kv_cache_bytes(n)), 0);
  for (int64_t e = 0; e < n; ++e) {
    numerics::simulate_q8(std::span(rows).subspan(e * kKvDim, kKvNopeDim), 64);
    kv_encode_entry_host(rows.data() + e * kKvDim, c.data() + kv_cache_data_offset(e), c.data() + kv_cache_scale_offset(e));
  }
  return c;
}

class AttentionTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

// HCA-style lists: window part (with −1 padding) then `comp` compressed entries.
TEST_P(AttentionTest, SparseAttentionMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const auto [start_pos, n] = GetParam();
  const int H = 2, d = 512, win = 128, ratio = 4;
  const int64_t total = start_pos + n, entries = total / ratio;
  const auto q = random_bf16(n * H * d, 0.5f, 11);
  const auto kv_new = random_bf16(n * d, 1.0f, 12);
  auto ring = random_bf16(win * d, 1.0f, 13);
  auto comp = random_bf16(std::max<int64_t>(entries, 1) * d, 1.0f, 14);
  const auto ring_fp8 = fp8_cache(ring), comp_fp8 = fp8_cache(comp);  // ring, comp now Q8-simulated
  const std::vector<float> sink = {0.3f, -1.0f};
  const int64_t window_len = cpu::window_part_length(start_pos, n, 0, win);
  const float scale = 1.0f / std::sqrt(512.0f);
  std::vector<float> want(n * H * d);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) {
      const int64_t pos = start_pos + t;
      std::vector<const float*> cand(window_len, nullptr);
      const int64_t first = std::max<int64_t>(0, pos - win + 1);
      for (int64_t src = first; src <= pos; ++src)
        cand[src - first] = src >= start_pos ? &kv_new[(src - start_pos) * d] : &ring[(src % win) * d];
      for (int64_t id = 0; id < (pos + 1) / ratio; ++id) cand.push_back(&comp[id * d]);
      cpu::sparse_attention_head(std::span(q).subspan((t * H + h) * d, d), cand, sink[h], scale,
                                 std::span(want).subspan((t * H + h) * d, d));
    }
  auto dq = to_device(q), dkv = to_device(kv_new), dsink = to_device(sink);
  auto dring = to_device(ring_fp8), dcomp = to_device(comp_fp8);
  DeviceBuffer<float> out(n * H * d);
  SparseAttnArgs a;
  a.q = dq.get();
  a.kv_new = dkv.get();
  a.ring = dring.get();
  a.compressed = dcomp.get();
  a.sink = dsink.get();
  a.scale = scale;
  a.H = H;
  a.d = d;
  a.win = win;
  a.ratio = ratio;
  a.n = n;
  a.start_pos = start_pos;
  a.window_len = window_len;
  a.out = out.get();
  sparse_attention(a, nullptr);
  EXPECT_LE(max_rel(out.download(), want), 1.0 / 128);  // exp may differ in the last fp32 bit
}

INSTANTIATE_TEST_SUITE_P(Positions, AttentionTest,
                         ::testing::Values(std::tuple{0, 1}, std::tuple{0, 70}, std::tuple{300, 1}, std::tuple{500, 9}));

class MhcTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(MhcTest, HcPreMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const auto [D, n] = GetParam();
  const int hc = 4, M = hc * (2 + hc);
  const auto streams = random_bf16(n * hc * D, 1.0f, 20);
  cpu::HcWeights w;
  w.fn = cpu::Fp32Linear{.out = M, .in = hc * D, .weight = random_bf16(M * hc * D, 0.01f, 21)};
  w.base = random_bf16(M, 0.1f, 22);
  w.scale = {1.0f, 0.9f, 1.1f};
  const cpu::HcParams p;
  std::vector<float> want_x(n * D), want_post(n * hc), want_comb(n * hc * hc);
  for (int t = 0; t < n; ++t)
    cpu::hc_pre(std::span(streams).subspan(t * hc * D, hc * D), w, p, std::span(want_x).subspan(t * D, D),
                std::span(want_post).subspan(t * hc, hc), std::span(want_comb).subspan(t * hc * hc, hc * hc));
  auto ds = to_device(streams), dfn = to_device(w.fn.weight), db = to_device(w.base), dsc = to_device(w.scale);
  DeviceBuffer<float> mixes(n * M), x(n * D), post(n * hc), comb(n * hc * hc);
  dense_linear(ds.get(), n, hc * D, dfn.get(), false, M, hc * D, 0, false, 0.0f, mixes.get(), nullptr);
  hc_pre_finish(ds.get(), mixes.get(), n, D, dsc.get(), db.get(), HcDeviceParams{}, x.get(), post.get(), comb.get(), nullptr);
  EXPECT_LE(max_rel(post.download(), want_post), 1e-5);
  EXPECT_LE(max_rel(comb.download(), want_comb), 1e-4);
  EXPECT_LE(max_rel(x.download(), want_x), 1.0 / 128);
}

TEST_P(MhcTest, HcHeadMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const auto [D, n] = GetParam();
  const int hc = 4;
  const auto streams = random_bf16(n * hc * D, 1.0f, 23);
  cpu::HcWeights w;
  w.fn = cpu::Fp32Linear{.out = hc, .in = hc * D, .weight = random_bf16(hc * hc * D, 0.01f, 24)};
  w.base = random_bf16(hc, 0.1f, 25);
  w.scale = {1.0f};
  const cpu::HcParams p;
  std::vector<float> want(n * D);
  for (int t = 0; t < n; ++t)
    cpu::hc_head(std::span(streams).subspan(t * hc * D, hc * D), w, p, std::span(want).subspan(t * D, D));
  auto ds = to_device(streams), dfn = to_device(w.fn.weight), db = to_device(w.base), dsc = to_device(w.scale);
  DeviceBuffer<float> mixes(n * hc), y(n * D);
  dense_linear(ds.get(), n, hc * D, dfn.get(), false, hc, hc * D, 0, false, 0.0f, mixes.get(), nullptr);
  hc_head_finish(ds.get(), mixes.get(), n, D, dsc.get(), db.get(), HcDeviceParams{}, y.get(), nullptr);
  EXPECT_LE(max_rel(y.download(), want), 1.0 / 128);
}

INSTANTIATE_TEST_SUITE_P(Sizes, MhcTest,
                         ::testing::Values(std::tuple{256, 3}, std::tuple{4096, 1}, std::tuple{4096, 16},
                                           std::tuple{4096, 64}, std::tuple{200, 2}));

}  // namespace
}  // namespace dsv4::gpu
