// The warpgroup-MMA forms of the tensor-core linears against the register-fed tiles, bit for bit:
// the bulk-copy lin8 and bf16 dense (sm90_lin8_bulk.cu, sm90_dense_bulk.cu; mma::bulk_tile()) and
// the TMA-streamed lin8 and bf16 dense (sm90_lin8_stream.cu, sm90_dense_stream.cu; mma::stream_tile()).
// GPU only (skips without one).
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "gpu/linear_fp8_case.h"
#include "gpu/linear_mma.h"
#include "gpu/ops.h"

namespace dsv4::gpu {
namespace {

// lin8 on forced tile `tile` (and lin8_multi over the first three weights) equals the first
// register-fed tile bit for bit, for each (in, tiny) case — tiny: every third weight-scale block
// at 2^-122, so the scaled partials part·s_x·s_w fall below the normal range there (their rounding
// must match the register tiles') — each row count and each weight of outs_n (≥ 3, the second
// not rounded). Seeds: weights wseed + 7j + in, activations xseed + rows + in.
void expect_lin8_tile_equals_register_tiles(int tile, std::initializer_list<std::pair<int64_t, bool>> ins,
                                            std::initializer_list<int64_t> row_counts,
                                            const std::vector<int64_t>& outs_small, const std::vector<int64_t>& outs_big,
                                            uint64_t wseed, uint64_t xseed) {
  for (const auto [in, tiny] : ins) {
    std::vector<int64_t> outs_n = outs_small;  // outs_big only up to K = 1024 (test time)
    if (in <= 1024) outs_n.insert(outs_n.end(), outs_big.begin(), outs_big.end());
    const int nw = int(outs_n.size());
    std::vector<Fp8Case> cases;
    std::vector<DeviceBuffer<uint8_t>> dw, ds;
    for (int j = 0; j < nw; ++j) {
      cases.emplace_back(outs_n[j], in, wseed + 7 * j + in);
      if (tiny)
        for (size_t i = 0; i < cases.back().sc.size(); i += 3) cases.back().sc[i] = 5;
      dw.push_back(to_device(cases.back().codes));
      ds.push_back(to_device(cases.back().sc));
    }
    for (const int64_t rows : row_counts) {
      auto dx = to_device(random_bf16(rows * in, 1.0f, xseed + rows + in));
      DeviceBuffer<uint8_t> q(rows * in);
      DeviceBuffer<float> qs(rows * in / 128);
      quantize_q8_rows(dx.get(), rows, in, q.get(), qs.get(), nullptr);
      auto run = [&](int forced, bool multi) {
        mma::force_tile(forced);
        std::vector<DeviceBuffer<float>> y;
        std::vector<Lin8Out> outs(nw);
        for (int j = 0; j < nw; ++j) {
          y.emplace_back(rows * outs_n[j]);
          outs[j] = {.w = dw[j].get(), .ws = ds[j].get(), .out = outs_n[j], .y = y[j].get(), .round_out = j != 1};
          if (!multi)
            lin8(q.get(), qs.get(), rows, 1, dw[j].get(), ds[j].get(), outs_n[j], in, nullptr, y[j].get(), nullptr,
                 outs[j].round_out);
        }
        if (multi) lin8_multi(q.get(), qs.get(), rows, in, std::span<const Lin8Out>(outs.data(), 3), nullptr);
        std::vector<std::vector<float>> h;
        for (int j = 0; j < (multi ? 3 : nw); ++j) h.push_back(y[j].download());
        mma::force_tile(-1);
        return h;
      };
      const auto want = run(0, false);  // the first register-fed tile
      for (const bool multi : {false, true}) {
        const auto got = run(tile, multi);
        for (size_t j = 0; j < got.size(); ++j)
          EXPECT_EQ(0, std::memcmp(got[j].data(), want[j].data(), want[j].size() * sizeof(float)))
              << "tile " << tile << " in " << in << " tiny " << tiny << " rows " << rows << " output " << j
              << " (out " << outs_n[j] << ") multi " << multi;
      }
    }
  }
}

// The bulk-copy wgmma lin8 (sm90_lin8_bulk.cu, mma::bulk_tile(); the default from
// kWgmmaMinRows rows) equals the register-fed tiles bit for bit: K of 4, 8 and 32 blocks (chains
// with no, one and four blocks), outputs with partial 128-tiles and scale blocks, rows with
// partial 128-row tiles, rounded and not, tiny scales, and lin8_multi's segments (each segment's
// own tiles).
TEST(Lin8BulkTest, EqualsTheRegisterTilesBitForBit) {
  SKIP_WITHOUT_GPU();
  expect_lin8_tile_equals_register_tiles(mma::bulk_tile(), {{512, false}, {1024, false}, {4096, false}, {4096, true}},
                                         {1, 130, 300}, {1040, 384, 72}, {}, 500, 700);
}

// The TMA-streamed lin8 for ≤ 64 rows (sm90_lin8_stream.cu, mma::stream_tile()) equals the
// register-fed tiles bit for bit: rows 1 … 64 (one to eight n8 fragments, partial ones), K of 4,
// 8, 32 and 64 blocks (chains with no, one, four and eight blocks), every cluster size (out 72 …
// 1040: 8 CTAs a tile; 4000: 4 or 8; 8000: 2 … 8; 15500: 1 — the chains summed through
// distributed shared memory or in registers), partial output tiles, rounded and not, tiny scales,
// and lin8_multi.
TEST(Lin8StreamTest, EqualsTheRegisterTilesBitForBit) {
  SKIP_WITHOUT_GPU();
  expect_lin8_tile_equals_register_tiles(mma::stream_tile(), {{512, false}, {1024, false}, {4096, true}, {8192, false}},
                                         {1, 5, 8, 9, 16, 24, 33, 64}, {1040, 384, 72}, {4000, 8000, 15500}, 900,
                                         950);
}

// bf16 dense on forced tile `tile` equals the first register-fed tile bit for bit: K of each of
// `ins`, bf16-valued and fp32 activations (the lo tiles), rounded with a post_scale and not,
// grouped (wo_a's form) and dense_linear_multi's segments, with partial row and output tiles, for
// each row count. Seeds: weights 800 + in, activations 810 + rows + in and 820 + rows.
void expect_dense_tile_equals_register_tiles(int tile, std::initializer_list<int64_t> ins,
                                             std::initializer_list<int64_t> row_counts) {
  for (const int64_t in : ins) {
    const int64_t out = 1040, G = 2, gout = 512, opg = gout / G;
    const std::vector<uint16_t> bits = to_bf16_bits(random_bf16(out * in, 0.05f, 800 + in));
    auto dwb = to_device(bits);
    for (const int64_t rows : row_counts) {
      const auto xb = random_bf16(rows * G * in, 1.0f, 810 + rows + in);
      std::vector<float> xf(rows * G * in);
      std::mt19937_64 rng(820 + rows);
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (float& v : xf) v = d(rng);  // full fp32 mantissas: the lo tiles
      auto dxb = to_device(xb), dxf = to_device(xf);
      auto run = [&](int forced) {
        mma::force_tile(forced);
        std::vector<DeviceBuffer<float>> y;
        for (int64_t n : {out, out, gout, gout, out, int64_t{200}}) y.emplace_back(rows * n);
        dense_linear(dxb.get(), rows, in, dwb.get(), true, out, in, 0, true, 0.0f, y[0].get(), nullptr);
        dense_linear(dxf.get(), rows, in, dwb.get(), true, out, in, 0, false, 0.0f, y[1].get(), nullptr);
        dense_linear(dxb.get(), rows, G * in, dwb.get(), true, gout, in, opg, true, 0.0f, y[2].get(), nullptr);
        dense_linear(dxf.get(), rows, G * in, dwb.get(), true, gout, in, opg, false, 0.0f, y[3].get(), nullptr);
        const DenseOut outs[2] = {{.w = dwb.get(), .out = out, .y = y[4].get()},
                                  {.w = dwb.get() + 100 * in, .out = 200, .y = y[5].get(), .round_bf16 = true,
                                   .post_scale = 0.25f}};
        dense_linear_multi(dxf.get(), rows, in, std::span<const DenseOut>(outs, 2), nullptr);
        std::vector<std::vector<float>> h;
        for (auto& b : y) h.push_back(b.download());
        mma::force_tile(-1);
        return h;
      };
      const auto want = run(0), got = run(tile);
      for (size_t k = 0; k < want.size(); ++k)
        EXPECT_EQ(0, std::memcmp(got[k].data(), want[k].data(), want[k].size() * sizeof(float)))
            << "tile " << tile << " in " << in << " rows " << rows << " call " << k;
    }
  }
}

// The bulk-copy bf16 dense kernel (sm90_dense_bulk.cu, mma::bulk_tile(); the default from
// 2048 rows): K of 4, 8 and 32 blocks.
TEST(DenseBulkTest, EqualsTheRegisterTilesBitForBit) {
  SKIP_WITHOUT_GPU();
  expect_dense_tile_equals_register_tiles(mma::bulk_tile(), {512, 1024, 4096}, {1, 130, 300});
}

// The TMA-streamed bf16 dense kernel (sm90_dense_stream.cu, mma::stream_tile(); the default for
// 2–64 rows of calls of ≥ 120 output tiles): every row tile size, K of 4 to 64 blocks (fewer
// blocks than chains, and a ring that wraps many times).
TEST(DenseStreamTest, EqualsTheRegisterTilesBitForBit) {
  SKIP_WITHOUT_GPU();
  expect_dense_tile_equals_register_tiles(mma::stream_tile(), {512, 1024, 4096, 8192}, {1, 5, 8, 9, 16, 24, 33, 64});
}

}  // namespace
}  // namespace dsv4::gpu
