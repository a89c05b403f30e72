// Per-kernel tests: every GPU kernel against the CPU reference function on fresh random
// inputs, parameterized over sizes. Skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "cpu/linear.h"
#include "cpu/mhc.h"
#include "gpu/cuda_check.h"
#include "gpu/kv_fp8.h"
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

struct LinShape {
  int64_t rows, out, in;
};
class LinearTest : public ::testing::TestWithParam<LinShape> {};

TEST_P(LinearTest, Lin8MatchesCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const auto [rows, out, in] = GetParam();
  const auto wf = random_bf16(out * in, 0.05f, 1);
  std::vector<uint8_t> codes(out * in), sc(((out + 127) / 128) * ((in + 127) / 128));
  model::quantize_fp8_blocks(wf.data(), out, in, codes.data(), sc.data());
  cpu::Fp8Linear ref{.out = out, .in = in};
  for (uint8_t c : codes) ref.weight.push_back(numerics::e4m3_to_float(c));
  for (uint8_t c : sc) ref.scale.push_back(numerics::e8m0_to_float(c));
  const auto x = random_bf16(rows * in, 1.0f, 2);
  std::vector<float> want(rows * out);
  for (int64_t r = 0; r < rows; ++r) ref.forward(std::span(x).subspan(r * in, in), std::span(want).subspan(r * out, out));
  auto dx = to_device(x);
  auto dw = to_device(codes), ds = to_device(sc);
  DeviceBuffer<uint8_t> q(rows * in);
  DeviceBuffer<float> qs(rows * in / 128), y(rows * out);
  quantize_q8_rows(dx.get(), rows, in, q.get(), qs.get(), nullptr);
  lin8(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, y.get(), nullptr);
  EXPECT_EQ(y.download(), want);
}

// Tensor-parallel partials: round_out = false keeps the fp32 sum; bf16 rounding it afterwards
// (round_bf16_values, as after the all-reduce) gives the rounded output bit for bit, and the
// unrounded values are not all bf16 already (else the flag would be untested).
TEST_P(LinearTest, Lin8UnroundedThenRoundedEqualsRounded) {
  SKIP_WITHOUT_GPU();
  const auto [rows, out, in] = GetParam();
  const auto wf = random_bf16(out * in, 0.05f, 5);
  std::vector<uint8_t> codes(out * in), sc(((out + 127) / 128) * ((in + 127) / 128));
  model::quantize_fp8_blocks(wf.data(), out, in, codes.data(), sc.data());
  const auto x = random_bf16(rows * in, 1.0f, 6);
  auto dx = to_device(x);
  auto dw = to_device(codes), ds = to_device(sc);
  DeviceBuffer<uint8_t> q(rows * in);
  DeviceBuffer<float> qs(rows * in / 128), rounded(rows * out), partial(rows * out);
  quantize_q8_rows(dx.get(), rows, in, q.get(), qs.get(), nullptr);
  lin8(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, rounded.get(), nullptr);
  lin8(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, partial.get(), nullptr, false);
  const auto unrounded = partial.download();
  int64_t not_bf16 = 0;
  for (float v : unrounded) not_bf16 += numerics::round_bf16(v) != v;
  EXPECT_GT(not_bf16, 0);
  round_bf16_values(partial.get(), rows * out, nullptr);
  EXPECT_EQ(partial.download(), rounded.download());
}

TEST_P(LinearTest, Lin4MatchesCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const auto [rows, out, in] = GetParam();
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

TEST_P(LinearTest, DenseBf16AndFp32MatchCpu) {
  SKIP_WITHOUT_GPU();
  const auto [rows, out, in] = GetParam();
  const auto w = random_bf16(out * in, 0.05f, 5);
  const auto x = random_bf16(rows * in, 1.0f, 6);
  cpu::Bf16Linear rb{.out = out, .in = in, .weight = w};
  cpu::Fp32Linear rf{.out = out, .in = in, .weight = w};
  std::vector<float> want_b(rows * out), want_f(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    rb.forward(std::span(x).subspan(r * in, in), std::span(want_b).subspan(r * out, out));
    rf.forward(std::span(x).subspan(r * in, in), std::span(want_f).subspan(r * out, out));
  }
  std::vector<uint16_t> bits;
  for (float v : w) bits.push_back(numerics::float_to_bf16_bits(v));
  auto dx = to_device(x);
  auto dwb = to_device(bits);
  auto dwf = to_device(w);
  DeviceBuffer<float> yb(rows * out), yf(rows * out);
  dense_linear(dx.get(), rows, in, dwb.get(), true, out, in, 0, true, 0.0f, yb.get(), nullptr);
  dense_linear(dx.get(), rows, in, dwf.get(), false, out, in, 0, false, 0.0f, yf.get(), nullptr);
  EXPECT_LE(max_rel(yb.download(), want_b), 1e-6);  // same double sum, other order
  EXPECT_LE(max_rel(yf.download(), want_f), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Values(LinShape{1, 128, 128}, LinShape{3, 200, 384}, LinShape{5, 256, 1024},
                                           LinShape{2, 64, 2048}));

// Decode-size (skinny) linears: M ∈ {1, 3, 16, 64} at Flash projection shapes (TP2 halves) and
// odd sizes; M = 65 takes the general kernels. Lin8 must match the CPU bit for bit (the
// skinny kernel keeps the exact block partials and the K-ordered fp32 sum); dense keeps the
// double sum (other order, same contract as DenseBf16AndFp32MatchCpu).
struct SkinnyShape {
  int64_t rows, out, in;
};
class SkinnyLinearTest : public ::testing::TestWithParam<SkinnyShape> {};

TEST_P(SkinnyLinearTest, Lin8MatchesCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const auto [rows, out, in] = GetParam();
  const auto wf = random_bf16(out * in, 0.05f, 31);
  std::vector<uint8_t> codes(out * in), sc(((out + 127) / 128) * ((in + 127) / 128));
  model::quantize_fp8_blocks(wf.data(), out, in, codes.data(), sc.data());
  // Spread the block scales so the K-ordered fp32 sum is sensitive to order.
  for (size_t i = 0; i < sc.size(); ++i) sc[i] = uint8_t(sc[i] + int(i % 5) - 2);
  cpu::Fp8Linear ref{.out = out, .in = in};
  for (uint8_t c : codes) ref.weight.push_back(numerics::e4m3_to_float(c));
  for (uint8_t c : sc) ref.scale.push_back(numerics::e8m0_to_float(c));
  const auto x = random_bf16(rows * in, 1.0f, 32);
  std::vector<float> want(rows * out);
  for (int64_t r = 0; r < rows; ++r) ref.forward(std::span(x).subspan(r * in, in), std::span(want).subspan(r * out, out));
  auto dx = to_device(x);
  auto dw = to_device(codes), ds = to_device(sc);
  DeviceBuffer<uint8_t> q(rows * in);
  DeviceBuffer<float> qs(rows * in / 128), y(rows * out), yp(rows * out);
  quantize_q8_rows(dx.get(), rows, in, q.get(), qs.get(), nullptr);
  lin8(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, y.get(), nullptr);
  EXPECT_EQ(y.download(), want);
  lin8(q.get(), qs.get(), rows, 1, dw.get(), ds.get(), out, in, nullptr, yp.get(), nullptr, false);
  round_bf16_values(yp.get(), rows * out, nullptr);
  EXPECT_EQ(yp.download(), want);
}

TEST_P(SkinnyLinearTest, DenseMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const auto [rows, out, in] = GetParam();
  const auto w = random_bf16(out * in, 0.05f, 33);
  const auto x = random_bf16(rows * in, 1.0f, 34);
  cpu::Bf16Linear rb{.out = out, .in = in, .weight = w};
  cpu::Fp32Linear rf{.out = out, .in = in, .weight = w};
  std::vector<float> want_b(rows * out), want_f(rows * out), want_s(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    rb.forward(std::span(x).subspan(r * in, in), std::span(want_b).subspan(r * out, out));
    rf.forward(std::span(x).subspan(r * in, in), std::span(want_f).subspan(r * out, out));
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
  dense_linear(dx.get(), rows, in, dwf.get(), false, out, in, 0, false, 0.0f, yf.get(), nullptr);
  dense_linear(dx.get(), rows, in, dwb.get(), true, out, in, 0, true, post, ys.get(), nullptr);
  EXPECT_LE(max_rel(yb.download(), want_b), 1e-6);
  EXPECT_LE(max_rel(yf.download(), want_f), 1e-6);
  EXPECT_LE(max_rel(ys.download(), want_s), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SkinnyLinearTest,
    ::testing::Values(SkinnyShape{1, 1024, 4096}, SkinnyShape{3, 1024, 4096}, SkinnyShape{16, 512, 4096},
                      SkinnyShape{64, 1024, 4096}, SkinnyShape{1, 4096, 1024}, SkinnyShape{16, 4096, 1024},
                      SkinnyShape{1, 200, 7168}, SkinnyShape{3, 72, 7168}, SkinnyShape{64, 130, 384},
                      SkinnyShape{65, 130, 384}, SkinnyShape{2, 24, 16384}, SkinnyShape{1, 4, 16384}));

// Grouped bf16 linear (wo_a): output row o reads x[(o / opg)·in, ...) of a row of G·in values.
TEST(SkinnyGroupedTest, GroupedDenseMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const int64_t rows : {1, 3, 16, 64}) {
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
    EXPECT_LE(max_rel(y.download(), want), 1e-6) << "rows " << rows;
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
