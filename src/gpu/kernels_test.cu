// Per-kernel tests of the pointwise, norm, attention and mHC kernels against the CPU reference
// functions on fresh random inputs, parameterized over sizes (the linears: linear_mma_test.cu,
// linear_small_out_test.cu). Skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "cpu/linear.h"
#include "cpu/mhc.h"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/gpu_test_util.h"
#include "gpu/kv_fp8.h"
#include "gpu/linear_mma.h"
#include "gpu/ops.h"
#include "gpu/sm90_wgmma_common.cuh"
#include "numerics/formats.h"
#include "numerics/hadamard.h"
#include "numerics/quant.h"
#include "numerics/rope.h"

namespace dsv4::gpu {
namespace {

__global__ void e4m3_encode_kernel(const float* x, uint8_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = float_to_e4m3(x[i]);
}

// The device encoder (hardware cvt on sm_89+) gives numerics::float_to_e4m3's code for every code's
// value, both neighbours of every midpoint between codes and the midpoints themselves (ties to
// even), zeros, tiny values, ±448 and beyond (saturation), NaN, and 2^20 random values in range.
TEST(E4m3EncodeTest, MatchesNumericsEverywhere) {
  SKIP_WITHOUT_GPU();
  std::vector<float> x = {0.0f, -0.0f, 1e-30f, -1e-30f, 448.0f, -448.0f, 460.0f, 464.0f, 1e9f, -1e9f,
                          std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (int c = 0; c < 0x7e; ++c) {
    const float a = numerics::e4m3_to_float(uint8_t(c)), b = numerics::e4m3_to_float(uint8_t(c + 1));
    const float mid = 0.5f * (a + b);  // exact: the codes' values have ≤ 4 significant bits
    for (const float v : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ud(-448.0f, 448.0f);
  std::uniform_int_distribution<int> ed(-20, 8);
  for (int i = 0; i < (1 << 20); ++i) x.push_back(i % 2 ? ud(rng) : std::ldexp(ud(rng) / 448.0f, ed(rng)));
  const int n = int(x.size());
  auto dx = to_device(x);
  DeviceBuffer<uint8_t> out(n);
  e4m3_encode_kernel<<<(n + 255) / 256, 256>>>(dx.get(), out.get(), n);
  CUDA_CHECK_LAUNCH();
  const std::vector<uint8_t> got = out.download();
  int bad = 0;
  for (int i = 0; i < n; ++i)
    if (got[i] != numerics::float_to_e4m3(x[i]) && bad++ < 5)
      ADD_FAILURE() << "x = " << x[i] << ": device " << int(got[i]) << ", numerics " << int(numerics::float_to_e4m3(x[i]));
  EXPECT_EQ(bad, 0);
}

__global__ void l2_policy_kernel(uint64_t* out) {
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(out[0]));
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(out[1]));
}

// The L2 policy constants of the weight copies (sm90_wgmma_common.cuh) are what createpolicy makes.
TEST(L2PolicyTest, ConstantsAreCreatepolicysValues) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer<uint64_t> out(2);
  l2_policy_kernel<<<1, 1>>>(out.get());
  CUDA_CHECK_LAUNCH();
  const std::vector<uint64_t> got = out.download();
  EXPECT_EQ(got[0], mma::detail::wgmma::kL2EvictFirst) << std::hex << got[0];
  EXPECT_EQ(got[1], mma::detail::wgmma::kL2EvictNormal) << std::hex << got[1];
}

__global__ void e2m1_round_trip_kernel(const float* x, uint8_t* codes, float* values, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    codes[i] = float_to_e2m1(x[i]);
    values[i] = e2m1_to_float(uint8_t(i & 15));
  }
}

// The device E2M1 encoder and decoder give numerics' codes and values: every code's value, every
// midpoint (ties to even) and both its float neighbours, both signs, zeros, beyond 6, infinities,
// NaN, and 2^20 random values.
TEST(E2m1Test, MatchesNumericsEverywhere) {
  SKIP_WITHOUT_GPU();
  std::vector<float> x = {0.0f, -0.0f, 1e-30f, 6.0f, 7.0f, 1e9f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (int c = 0; c < 7; ++c) {
    const float a = numerics::e2m1_to_float(uint8_t(c)), b = numerics::e2m1_to_float(uint8_t(c + 1));
    const float mid = 0.5f * (a + b);
    for (const float v : {a, b, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> ud(-7.0f, 7.0f);
  for (int i = 0; i < (1 << 20); ++i) x.push_back(ud(rng));
  const int n = int(x.size());
  auto dx = to_device(x);
  DeviceBuffer<uint8_t> codes(n);
  DeviceBuffer<float> values(n);
  e2m1_round_trip_kernel<<<(n + 255) / 256, 256>>>(dx.get(), codes.get(), values.get(), n);
  CUDA_CHECK_LAUNCH();
  const std::vector<uint8_t> got = codes.download();
  const std::vector<float> vals = values.download();
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    if (got[i] != numerics::float_to_e2m1(x[i]) && bad++ < 5)
      ADD_FAILURE() << "x = " << x[i] << ": device " << int(got[i]) << ", numerics " << int(numerics::float_to_e2m1(x[i]));
    const float want = numerics::e2m1_to_float(uint8_t(i & 15));
    if (std::memcmp(&vals[i], &want, sizeof(float)) != 0 && bad++ < 5)
      ADD_FAILURE() << "code " << (i & 15) << ": device " << vals[i] << ", numerics " << want;
  }
  EXPECT_EQ(bad, 0);
}

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
