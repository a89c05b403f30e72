// fused_rows.cu against the separate calls it replaces, bit for bit, on fresh random rows:
// several widths, row counts, device positions and consecutive ones; plus hc_post's round_f
// against round_bf16_values first. Skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "cpu/mhc.h"
#include "gpu/cuda_check.h"
#include "gpu/decode_ops.h"
#include "gpu/gpu_test_util.h"
#include "gpu/kv_fp8.h"
#include "gpu/ops.h"

namespace dsv4::gpu {
namespace {

constexpr int kMaxPos = 300;

// A RoPE table [kMaxPos, pairs, 2] of random {cos, sin}-like values.
std::vector<float> random_table(int pairs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> t(size_t(kMaxPos) * pairs * 2);
  for (float& v : t) v = d(rng);
  return t;
}

std::vector<int32_t> random_positions(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> p(n);
  for (auto& v : p) v = int32_t(rng() % kMaxPos);
  return p;
}

// Rows with a spread of magnitudes (exercises the Q8/Q4 block scales) and a few exact zeros.
std::vector<float> spread_rows(int64_t rows, int64_t dim, uint64_t seed) {
  auto x = random_bf16(size_t(rows * dim), 1.0f, seed);
  for (int64_t i = 0; i < rows * dim; ++i) x[i] *= float(1 << (i / 64 % 7)) / 8.0f;
  x[1] = 0.0f;
  return x;
}

TEST(FusedRowsTest, RmsNormQ8EqualsNormThenQuantize) {
  SKIP_WITHOUT_GPU();
  for (const int64_t dim : {1024, 4096, 512, 128}) {
    for (const int64_t rows : {1, 3, 9}) {
      const auto x = spread_rows(rows, dim, 100 + dim + rows);
      auto w = random_bf16(size_t(dim), 0.5f, 7);
      for (float& v : w) v += 1.0f;
      auto dx = to_device(x), dw = to_device(w);
      DeviceBuffer<float> y_ref(rows * dim), y(rows * dim), s_ref(rows * dim / 128), sc(rows * dim / 128),
          sc2(rows * dim / 128);
      DeviceBuffer<uint8_t> q_ref(rows * dim), q(rows * dim), q2(rows * dim);
      rms_norm_rows(dx.get(), dw.get(), rows, dim, 1e-6f, y_ref.get(), nullptr);
      quantize_q8_rows(y_ref.get(), rows, dim, q_ref.get(), s_ref.get(), nullptr);
      rms_norm_q8_rows(dx.get(), dw.get(), rows, dim, 1e-6f, y.get(), q.get(), sc.get(), nullptr);
      rms_norm_q8_rows(dx.get(), dw.get(), rows, dim, 1e-6f, nullptr, q2.get(), sc2.get(), nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto at = " dim " + std::to_string(dim) + " rows " + std::to_string(rows);
      EXPECT_EQ(y.download(), y_ref.download()) << at;
      EXPECT_EQ(q.download(), q_ref.download()) << at;
      EXPECT_EQ(sc.download(), s_ref.download()) << at;
      EXPECT_EQ(q2.download(), q_ref.download()) << at;
      EXPECT_EQ(sc2.download(), s_ref.download()) << at;
    }
  }
}

TEST(FusedRowsTest, HeadRmsRopeEqualsHeadRmsThenRope) {
  SKIP_WITHOUT_GPU();
  for (const int len : {512, 128, 100}) {
    const int pairs = 32, heads = 5;
    for (const int64_t n : {1, 4}) {
      const int64_t rows = n * heads;
      const auto x = spread_rows(rows, len, 200 + len + n);
      const auto table = random_table(pairs, 3);
      const auto pos = random_positions(n, 4 + n);
      auto dt = to_device(table);
      auto dp = to_device(pos);
      for (const bool device_pos : {true, false}) {
        auto ref = to_device(x), got = to_device(x);
        head_rms_bf16_rows(ref.get(), rows, len, 1e-6f, nullptr);
        RowPositions rp{.rows_per_pos = heads};
        if (device_pos) {
          decode_rope_rows(ref.get(), rows, len, heads, dp.get(), dt.get(), pairs, false, nullptr);
          rp.positions = dp.get();
        } else {
          rope_rows(ref.get(), rows, len, heads, 17, 1, dt.get(), pairs, false, nullptr);
          rp.pos0 = 17;
        }
        head_rms_rope_rows(got.get(), rows, len, 1e-6f, dt.get(), pairs, rp, nullptr);
        EXPECT_EQ(got.download(), ref.download()) << "len " << len << " n " << n << " device_pos " << device_pos;
      }
    }
  }
}

TEST(FusedRowsTest, NormRopeSimulateQ8EqualsTheThreeCalls) {
  SKIP_WITHOUT_GPU();
  for (const int dim : {512, 256, 2048}) {  // 2048: not one float4 per thread (the separate calls)
    const int pairs = 32, block = 64;
    for (const int64_t rows : {1, 6}) {
      const auto x = spread_rows(rows, dim, 300 + dim + rows);
      auto w = random_bf16(size_t(dim), 0.5f, 8);
      for (float& v : w) v += 1.0f;
      const auto table = random_table(pairs, 5);
      const auto pos = random_positions(rows, 6 + rows);
      auto dx = to_device(x), dw = to_device(w), dt = to_device(table);
      auto dp = to_device(pos);
      for (const bool device_pos : {true, false}) {
        DeviceBuffer<float> ref(rows * dim), got(rows * dim);
        rms_norm_rows(dx.get(), dw.get(), rows, dim, 1e-6f, ref.get(), nullptr);
        RowPositions rp;
        if (device_pos) {
          decode_rope_rows(ref.get(), rows, dim, 1, dp.get(), dt.get(), pairs, false, nullptr);
          rp.positions = dp.get();
        } else {
          rope_rows(ref.get(), rows, dim, 1, 40, 1, dt.get(), pairs, false, nullptr);
          rp.pos0 = 40;
        }
        simulate_q8_rows(ref.get(), rows, dim, dim - 2 * pairs, block, nullptr);
        norm_rope_simulate_q8_rows(dx.get(), dw.get(), rows, dim, 1e-6f, dt.get(), pairs, rp, block, got.get(), nullptr);
        EXPECT_EQ(got.download(), ref.download()) << "dim " << dim << " rows " << rows << " device_pos " << device_pos;
      }
    }
  }
}

// The decode variant that also writes each row into its window ring: y and the ring bytes equal
// norm_rope_simulate_q8_rows then decode_ring_update (rows at positions wrapping the ring).
TEST(FusedRowsTest, KvRowsToRingEqualsTailThenRingUpdate) {
  SKIP_WITHOUT_GPU();
  const int dim = kKvDim, pairs = 32, block = 64, win = 128;
  const int64_t rows = 5;
  const auto x = spread_rows(rows, dim, 500);
  auto w = random_bf16(size_t(dim), 0.5f, 501);
  for (float& v : w) v += 1.0f;
  const auto table = random_table(pairs, 502);
  const std::vector<int32_t> pos = {0, 127, 128, 299, 200};
  auto dx = to_device(x), dw = to_device(w), dt = to_device(table);
  auto dp = to_device(pos);
  const size_t ring_bytes = size_t(kv_cache_bytes(win));
  DeviceBuffer<uint8_t> rings_ref(rows * ring_bytes), rings(rows * ring_bytes);
  CUDA_CHECK(cudaMemset(rings_ref.get(), 0x5a, rows * ring_bytes));
  CUDA_CHECK(cudaMemset(rings.get(), 0x5a, rows * ring_bytes));
  std::vector<DecodeLayerCache> c_ref(rows), c_new(rows);
  for (int64_t r = 0; r < rows; ++r) {
    c_ref[r].window = rings_ref.get() + r * ring_bytes;
    c_new[r].window = rings.get() + r * ring_bytes;
  }
  auto dc_ref = to_device(c_ref), dc_new = to_device(c_new);
  DeviceBuffer<float> ref(rows * dim), got(rows * dim);
  norm_rope_simulate_q8_rows(dx.get(), dw.get(), rows, dim, 1e-6f, dt.get(), pairs, RowPositions{.positions = dp.get()},
                             block, ref.get(), nullptr);
  decode_ring_update(ref.get(), rows, dp.get(), dc_ref.get(), win, dim, nullptr);
  decode_kv_rows_to_ring(dx.get(), dw.get(), rows, dim, 1e-6f, dt.get(), pairs, dp.get(), block, got.get(),
                         dc_new.get(), win, nullptr);
  EXPECT_EQ(got.download(), ref.download());
  EXPECT_EQ(rings.download(), rings_ref.download());
}

TEST(FusedRowsTest, RopeHadamardQ4EqualsTheThreeCalls) {
  SKIP_WITHOUT_GPU();
  for (const int len : {128, 64, 256, 512}) {  // 64 / 128 / 256: the warp-per-row kernel
    const int pairs = 32, heads = 8;
    for (const int64_t n : {1, 3, 37}) {
      const int64_t rows = n * heads;
      const auto x = spread_rows(rows, len, 400 + len + n);
      const auto table = random_table(pairs, 9);
      const auto pos = random_positions(n, 10 + n);
      auto dt = to_device(table);
      auto dp = to_device(pos);
      for (const bool device_pos : {true, false}) {
        auto ref = to_device(x), got = to_device(x);
        RowPositions rp{.rows_per_pos = heads};
        if (device_pos) {
          decode_rope_rows(ref.get(), rows, len, heads, dp.get(), dt.get(), pairs, false, nullptr);
          rp.positions = dp.get();
        } else {
          rope_rows(ref.get(), rows, len, heads, 250, 1, dt.get(), pairs, false, nullptr);
          rp.pos0 = 250;
        }
        hadamard_rows(ref.get(), rows, len, nullptr);
        simulate_q4_rows(ref.get(), rows, len, len, 32, nullptr);
        rope_hadamard_q4_rows(got.get(), rows, len, dt.get(), pairs, rp, nullptr);
        EXPECT_EQ(got.download(), ref.download()) << "len " << len << " n " << n << " device_pos " << device_pos;
      }
    }
  }
}

// hc_post(f, round_f = true) == round_bf16_values(f) then hc_post(f, false), on unrounded f.
TEST(FusedRowsTest, HcPostRoundsItsInputOnRead) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 3, dim = 4096;
  const int hc = 4;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> f(n * dim), post(n * hc), comb(n * hc * hc);
  for (float& v : f) v = d(rng);  // not bf16-valued
  for (float& v : post) v = d(rng);
  for (float& v : comb) v = d(rng);
  const auto streams = random_bf16(size_t(n * hc * dim), 1.0f, 12);
  auto df = to_device(f), dpost = to_device(post), dcomb = to_device(comb);
  auto ref = to_device(streams), got = to_device(streams);
  auto fr = to_device(f);
  round_bf16_values(fr.get(), n * dim, nullptr);
  hc_post(fr.get(), dpost.get(), dcomb.get(), n, dim, hc, false, ref.get(), nullptr);
  hc_post(df.get(), dpost.get(), dcomb.get(), n, dim, hc, true, got.get(), nullptr);
  EXPECT_EQ(got.download(), ref.download());
  EXPECT_EQ(df.download(), f);  // f itself is left as it was
}

// hc_post against the CPU's hc_post bit for bit: hc = 4 on aligned rows (the float4 kernel), hc = 4
// at an odd offset and hc = 3 (the general kernel); bf16-valued f as the model passes it.
TEST(FusedRowsTest, HcPostMatchesCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  for (const auto& [hc, dim, offset] : {std::tuple{4, 4096, 0}, std::tuple{4, 4096, 1}, std::tuple{3, 1000, 0},
                                        std::tuple{4, 64, 0}}) {
    const int64_t n = 5;
    std::mt19937_64 rng(21 + hc + offset);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> post(n * hc), comb(n * hc * hc);
    for (float& v : post) v = d(rng);
    for (float& v : comb) v = d(rng);
    const auto f = random_bf16(size_t(n * dim), 1.0f, 22);
    const auto streams = random_bf16(size_t(n * hc * dim), 1.0f, 23);
    std::vector<float> want = streams;
    for (int64_t t = 0; t < n; ++t)
      cpu::hc_post(std::span(f).subspan(t * dim, dim), std::span(post).subspan(t * hc, hc),
                   std::span(comb).subspan(t * hc * hc, hc * hc), hc, std::span(want).subspan(t * hc * dim, hc * dim));
    // offset > 0: every buffer starts `offset` floats into its allocation (not 16-byte aligned).
    auto up = [&](const std::vector<float>& v) {
      std::vector<float> padded(v.size() + offset, 0.0f);
      std::copy(v.begin(), v.end(), padded.begin() + offset);
      return to_device(padded);
    };
    auto df = up(f), dpost = up(post), dcomb = up(comb), dst = up(streams);
    hc_post(df.get() + offset, dpost.get() + offset, dcomb.get() + offset, n, dim, hc, true, dst.get() + offset,
            nullptr);
    const auto got = dst.download();
    EXPECT_EQ(0, std::memcmp(got.data() + offset, want.data(), want.size() * sizeof(float)))
        << "hc " << hc << " dim " << dim << " offset " << offset;
  }
}

}  // namespace
}  // namespace dsv4::gpu
