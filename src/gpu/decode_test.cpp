// Batched decode kernels: every decode_ops.h kernel against its host-position kernel in ops.h
// run once per row (fresh random inputs, random per-row positions: entries emitted or not,
// positions inside and past the window), bitwise. The model-level decode tests are in
// gpu_model_decode_test.cpp. Skips when no CUDA device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/decode_ops.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_test_util.h"
#include "gpu/kv_fp8.h"
#include "gpu/ops.h"

namespace dsv4::gpu {
namespace {
// Random values that are exact in bf16.
std::vector<float> random_values(size_t n, float std, uint64_t seed, float mean = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, std);
  std::vector<float> v(n);
  for (float& x : v) {
    uint32_t bits;
    const float f = d(rng);
    std::memcpy(&bits, &f, 4);
    bits &= 0xffff0000u;
    std::memcpy(&x, &bits, 4);
  }
  return v;
}

// The bf16 bit patterns of random_values (exact).
std::vector<uint16_t> random_bf16_bits(size_t n, float std, uint64_t seed) {
  const std::vector<float> v = random_values(n, std, seed);
  std::vector<uint16_t> b(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    b[i] = static_cast<uint16_t>(bits >> 16);
  }
  return b;
}

std::vector<int32_t> as_i32(const std::vector<int>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

std::vector<uint8_t> random_bytes(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (uint8_t& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

// FP8 cache image (kv_fp8.h) of rows [n, 512] (stores their Q8 simulation).
std::vector<uint8_t> fp8_cache(const std::vector<float>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size()) / kKvDim;
  std::vector<uint8_t> c(static_cast<size_t>(kv_cache_bytes(n)), 0);
  for (int64_t e = 0; e < n; ++e)
    kv_encode_entry_host(rows.data() + e * kKvDim, c.data() + kv_cache_data_offset(e), c.data() + kv_cache_scale_offset(e));
  return c;
}

TEST(DecodeKernels, RopeMatchesPerRowRope) {
  SKIP_WITHOUT_GPU();
  const int64_t H = 3, d = 64, max_pos = 300;
  const int pairs = 16;
  const std::vector<int> pos = {0, 7, 127, 128, 299};
  const int64_t B = static_cast<int64_t>(pos.size());
  const auto table = to_device(random_values(max_pos * pairs * 2, 1.0f, 1));
  const auto x0 = random_values(B * H * d, 1.0f, 2);
  const auto pos_dev = to_device(as_i32(pos));
  for (bool inverse : {false, true}) {
    auto xd = to_device(x0), xr = to_device(x0);
    decode_rope_rows(xd.get(), B * H, d, H, pos_dev.get(), table.get(), pairs, inverse, nullptr);
    for (int64_t b = 0; b < B; ++b)
      rope_rows(xr.get() + b * H * d, H, d, H, pos[b], 1, table.get(), pairs, inverse, nullptr);
    const auto got = xd.download(), want = xr.download();
    EXPECT_TRUE(same_bits(got, want)) << "inverse " << inverse;
    EXPECT_FALSE(same_bits(got, x0));
  }
}

// decode_rope_inverse_bf16 rotates like decode_rope_rows (same bits) and writes x's bf16 bits
// with a flag per row and block of kBf16CopyFlagValues values: blocks of bf16 values (the
// attention's output) are flagged 1, a block with one value that is not a bf16 value 0. Rows of
// 40 heads × 64: three blocks, the last partial.
TEST(DecodeKernels, RopeInverseBf16EqualsRopeAndItsBf16Copy) {
  SKIP_WITHOUT_GPU();
  const int H = 40, d = 64, pairs = 16, max_pos = 300;
  const std::vector<int> pos = {0, 7, 127, 128, 299};
  const int64_t B = static_cast<int64_t>(pos.size()), width = int64_t{H} * d;
  const int64_t blocks = (width + kBf16CopyFlagValues - 1) / kBf16CopyFlagValues;
  ASSERT_EQ(blocks, 3);
  const auto table = to_device(random_values(max_pos * pairs * 2, 1.0f, 1));
  std::vector<float> x0 = random_values(B * width, 1.0f, 3);
  for (float& v : x0) v = numerics::round_bf16(v);
  x0[1 * width + 5] = 1.0f + 0x1p-12f;                // row 1, block 0: not a bf16 value (not rotary)
  x0[3 * width + 2048 + 3] = 1.0f + 0x1p-12f;         // row 3, block 2
  x0[4 * width + 3] = numerics::round_bf16(1e-30f);   // row 4: a tiny bf16 value (still 1)
  const auto pos_dev = to_device(as_i32(pos));
  auto xd = to_device(x0), xr = to_device(x0);
  DeviceBuffer<uint16_t> x16(B * width);
  DeviceBuffer<int32_t> exact(B * blocks);
  decode_rope_inverse_bf16(xd.get(), B, H, d, pos_dev.get(), table.get(), pairs, x16.get(), exact.get(), nullptr);
  decode_rope_rows(xr.get(), B * H, d, H, pos_dev.get(), table.get(), pairs, true, nullptr);
  const auto got = xd.download(), want = xr.download();
  EXPECT_TRUE(same_bits(got, want));
  const auto h = x16.download();
  const auto ok = exact.download();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < blocks; ++c) {
      const bool flagged_off = (b == 1 && c == 0) || (b == 3 && c == 2);
      EXPECT_EQ(ok[b * blocks + c], flagged_off ? 0 : 1) << "row " << b << " block " << c;
    }
  for (int64_t i = 0; i < B * width; ++i)
    if (numerics::round_bf16(want[i]) == want[i]) ASSERT_EQ(h[i], numerics::float_to_bf16_bits(want[i])) << i;
}

struct CompressorCase {
  int ratio, h;
  bool overlap, indexer;
  std::vector<int> pos;
};
class DecodeCompressorTest : public ::testing::TestWithParam<CompressorCase> {};

// decode_compressor's arguments for case cc (the caller sets kv / score).
DecodeCompressorArgs compressor_args(const CompressorCase& cc, const float* ape, const float* norm,
                                     const float* rope_table, int pairs, float eps) {
  DecodeCompressorArgs a;
  a.ape = ape;
  a.norm = norm;
  a.rope_table = rope_table;
  a.pairs = pairs;
  a.eps = eps;
  a.ratio = cc.ratio;
  a.h = cc.h;
  a.overlap = cc.overlap;
  a.indexer = cc.indexer;
  return a;
}

TEST_P(DecodeCompressorTest, MatchesStepAndFinishPerRow) {
  SKIP_WITHOUT_GPU();
  const CompressorCase cc = GetParam();
  const int64_t max_len = 512, B = static_cast<int64_t>(cc.pos.size());
  const int64_t width = (cc.overlap ? 2 : 1) * int64_t{cc.h}, slots = (cc.overlap ? 2 : 1) * int64_t{cc.ratio};
  const int64_t entries = max_len / cc.ratio;
  const int pairs = 32;
  const float eps = 1e-6f;
  const auto kv = to_device(random_values(B * width, 1.0f, 10));
  const auto score = to_device(random_values(B * width, 1.0f, 11));
  const auto ape = to_device(random_values(cc.ratio * width, 0.5f, 12));
  const auto norm = to_device(random_values(cc.h, 0.1f, 13, 1.0f));
  const auto table = to_device(random_values(max_len * pairs * 2, 1.0f, 14));
  // Entries: bf16 indexer keys (ent), or the attention compressor's FP8 cache (kvc).
  std::vector<DeviceBuffer<float>> st_kv, st_sc, ref_kv, ref_sc;
  std::vector<DeviceBuffer<uint16_t>> ent, ref_ent;
  std::vector<DeviceBuffer<uint8_t>> kvc, ref_kvc;
  std::vector<DecodeLayerCache> table_host(static_cast<size_t>(B));
  int emitted = 0;
  for (int64_t b = 0; b < B; ++b) {
    const auto k0 = random_values(slots * width, 1.0f, 100 + b), s0 = random_values(slots * width, 1.0f, 200 + b);
    st_kv.push_back(to_device(k0));
    st_sc.push_back(to_device(s0));
    ref_kv.push_back(to_device(k0));
    ref_sc.push_back(to_device(s0));
    DecodeCompressorCache c{.state_kv = st_kv.back().get(), .state_score = st_sc.back().get()};
    if (cc.indexer) {
      const auto e0 = random_bf16_bits(entries * cc.h, 1.0f, 300 + b);
      ent.push_back(to_device(e0));
      ref_ent.push_back(to_device(e0));
      c.keys = ent.back().get();
      table_host[b].index = c;
    } else {
      const auto e0 = random_bytes(kv_cache_bytes(entries), 300 + b);
      kvc.push_back(to_device(e0));
      ref_kvc.push_back(to_device(e0));
      c.cache = kvc.back().get();
      table_host[b].comp = c;
    }
    emitted += (cc.pos[b] + 1) % cc.ratio == 0;
  }
  ASSERT_GT(emitted, 0);
  ASSERT_LT(emitted, B);
  const auto caches = to_device(table_host);
  const auto pos_dev = to_device(as_i32(cc.pos));
  DecodeCompressorArgs a = compressor_args(cc, ape.get(), norm.get(), table.get(), pairs, eps);
  a.kv = kv.get();
  a.score = score.get();
  decode_compressor(a, B, pos_dev.get(), caches.get(), nullptr);
  DeviceBuffer<float> staging(static_cast<size_t>(cc.h));  // the raw entry
  for (int64_t b = 0; b < B; ++b) {
    const int64_t p = cc.pos[b];
    const int64_t first = p / cc.ratio, total = (p + 1) / cc.ratio;
    float* rows = staging.get();
    compressor_step(kv.get() + b * width, score.get() + b * width, ape.get(), 1, p, cc.ratio, cc.h, cc.overlap,
                    ref_kv[b].get(), ref_sc[b].get(), rows, nullptr);
    if (cc.indexer)
      compressor_finish_index_keys(rows, first, total - first, cc.h, norm.get(), eps, cc.ratio, table.get(), pairs,
                                   ref_ent[b].get(), nullptr);
    else
      compressor_finish(rows, first, total - first, cc.h, norm.get(), eps, cc.ratio, table.get(), pairs,
                        ref_kvc[b].get(), nullptr);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_TRUE(same_bits(st_kv[b].download(), ref_kv[b].download())) << "state kv, row " << b;
    EXPECT_TRUE(same_bits(st_sc[b].download(), ref_sc[b].download())) << "state score, row " << b;
    if (cc.indexer)
      EXPECT_TRUE(same_bits(ent[b].download(), ref_ent[b].download())) << "keys, row " << b << " pos " << cc.pos[b];
    else
      EXPECT_TRUE(same_bits(kvc[b].download(), ref_kvc[b].download())) << "FP8 cache, row " << b << " pos " << cc.pos[b];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeCompressorTest,
    ::testing::Values(CompressorCase{4, 128, true, true, {0, 2, 3, 7, 130, 131, 255, 300}},
                      CompressorCase{4, 512, true, false, {1, 3, 11, 127, 128, 200, 511}},
                      CompressorCase{128, 512, false, false, {0, 126, 127, 255, 256, 300, 383}}));

// compressor_step evaluates a call's tokens in parallel (compressor.cu): chunked calls at any
// start position must leave the state and entries the serial per-token machine (the decode
// kernel, one call per position) leaves, bit for bit, from an arbitrary initial state.
TEST_P(DecodeCompressorTest, ChunkedStepMatchesTokenByToken) {
  SKIP_WITHOUT_GPU();
  const CompressorCase cc = GetParam();
  const int64_t N = 400, entries = N / cc.ratio + 1;
  const int64_t width = (cc.overlap ? 2 : 1) * int64_t{cc.h}, slots = (cc.overlap ? 2 : 1) * int64_t{cc.ratio};
  const int pairs = 32;
  const float eps = 1e-6f;
  const auto kv = to_device(random_values(N * width, 1.0f, 20));
  const auto score = to_device(random_values(N * width, 1.0f, 21));
  const auto ape = to_device(random_values(cc.ratio * width, 0.5f, 22));
  const auto norm = to_device(random_values(cc.h, 0.1f, 23, 1.0f));
  const auto table = to_device(random_values(N * pairs * 2, 1.0f, 24));
  const auto k0 = random_values(slots * width, 1.0f, 25), s0 = random_values(slots * width, 1.0f, 26);
  auto st_kv = to_device(k0), st_sc = to_device(s0), ref_kv = to_device(k0), ref_sc = to_device(s0);
  DeviceBuffer<uint16_t> keys, ref_keys;
  DeviceBuffer<uint8_t> cache, ref_cache;
  auto raw = to_device(std::vector<float>(static_cast<size_t>(entries * cc.h)));
  if (cc.indexer) {
    const auto e0 = random_bf16_bits(entries * cc.h, 1.0f, 27);
    keys = to_device(e0);
    ref_keys = to_device(e0);
  } else {
    const auto e0 = random_bytes(kv_cache_bytes(entries), 27);
    cache = to_device(e0);
    ref_cache = to_device(e0);
  }
  // Chunked: as GpuModel::compress (step, then finish of the entries the call emitted).
  const std::vector<int64_t> cuts = {0, 5, 6, 133, 134, 300, N};
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const int64_t start = cuts[i], n = cuts[i + 1] - start;
    const int64_t first = start / cc.ratio, total = (start + n) / cc.ratio;
    float* rows = raw.get();
    compressor_step(kv.get() + start * width, score.get() + start * width, ape.get(), n, start, cc.ratio, cc.h,
                    cc.overlap, st_kv.get(), st_sc.get(), rows, nullptr);
    if (cc.indexer)
      compressor_finish_index_keys(rows, first, total - first, cc.h, norm.get(), eps, cc.ratio, table.get(), pairs,
                                   keys.get(), nullptr);
    else
      compressor_finish(rows, first, total - first, cc.h, norm.get(), eps, cc.ratio, table.get(), pairs,
                        cache.get(), nullptr);
  }
  // Token by token on the decode kernel.
  DecodeCompressorCache c{.state_kv = ref_kv.get(), .state_score = ref_sc.get()};
  DecodeLayerCache row;
  if (cc.indexer) {
    c.keys = ref_keys.get();
    row.index = c;
  } else {
    c.cache = ref_cache.get();
    row.comp = c;
  }
  const auto caches = to_device(std::vector<DecodeLayerCache>{row});
  std::vector<int> all(static_cast<size_t>(N));
  for (int64_t p = 0; p < N; ++p) all[p] = static_cast<int>(p);
  const auto pos_dev = to_device(as_i32(all));
  DecodeCompressorArgs a = compressor_args(cc, ape.get(), norm.get(), table.get(), pairs, eps);
  for (int64_t p = 0; p < N; ++p) {
    a.kv = kv.get() + p * width;
    a.score = score.get() + p * width;
    decode_compressor(a, 1, pos_dev.get() + p, caches.get(), nullptr);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bits(st_kv.download(), ref_kv.download())) << "state kv";
  EXPECT_TRUE(same_bits(st_sc.download(), ref_sc.download())) << "state score";
  if (cc.indexer)
    EXPECT_TRUE(same_bits(keys.download(), ref_keys.download())) << "indexer keys";
  else
    EXPECT_TRUE(same_bits(fp8_entries(cache, N / cc.ratio), fp8_entries(ref_cache, N / cc.ratio))) << "FP8 cache";
}

TEST(DecodeKernels, IndexTopkMatchesPerRow) {
  SKIP_WITHOUT_GPU();
  const int ratio = 4, heads = 8, dh = 128;
  const int64_t max_len = 512, entries = max_len / ratio;
  for (int k : {4, 64}) {
    const std::vector<int> pos = {0, 3, 10, 100, 300, 511};
    const int64_t B = static_cast<int64_t>(pos.size());
    const auto q = to_device(random_values(B * heads * dh, 1.0f, 20 + k));
    const auto w = to_device(random_values(B * heads, 0.3f, 21 + k));
    std::vector<DeviceBuffer<uint16_t>> keys;
    std::vector<DecodeLayerCache> table_host(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      keys.push_back(to_device(random_bf16_bits(entries * dh, 0.2f, 400 + b + k)));
      table_host[b].index.keys = keys.back().get();
    }
    const auto caches = to_device(table_host);
    const auto pos_dev = to_device(as_i32(pos));
    DeviceBuffer<float> scores(static_cast<size_t>(B * entries));
    DeviceBuffer<int32_t> sel(static_cast<size_t>(B * k)), cnt(static_cast<size_t>(B));
    sel.fill_bytes(0xff);
    decode_index_topk(q.get(), w.get(), B, pos_dev.get(), caches.get(), ratio, heads, dh, entries, scores.get(),
                      entries, k, sel.get(), cnt.get(), nullptr);
    const auto got_sc = scores.download();
    const auto got_cnt = cnt.download();
    const auto got_sel = sel.download();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t visible = (pos[b] + 1) / ratio, stride = std::max<int64_t>(1, visible);
      DeviceBuffer<float> rs(static_cast<size_t>(stride));
      DeviceBuffer<int32_t> rsel(static_cast<size_t>(k)), rcnt(1);
      index_scores(q.get() + b * heads * dh, w.get() + b * heads, keys[b].get(), 1, pos[b], ratio, heads, dh,
                   rs.get(), stride, nullptr);
      index_topk(rs.get(), 1, pos[b], ratio, stride, k, rsel.get(), rcnt.get(), nullptr);
      const auto want_sc = rs.download();
      const auto want_sel = rsel.download();
      const int32_t want_cnt = rcnt.download()[0];
      ASSERT_EQ(got_cnt[b], want_cnt) << "row " << b;
      EXPECT_EQ(want_cnt, std::min<int64_t>(k, visible));
      EXPECT_EQ(0, std::memcmp(got_sc.data() + b * entries, want_sc.data(), visible * sizeof(float))) << "row " << b;
      EXPECT_EQ(0, std::memcmp(got_sel.data() + b * k, want_sel.data(), want_cnt * sizeof(int32_t))) << "row " << b;
    }
  }
}

TEST(DecodeKernels, SparseAttentionAndRingMatchPerRow) {
  SKIP_WITHOUT_GPU();
  const int H = 4, d = 512, win = 128, topk = 16;
  const int64_t max_len = 512;
  const std::vector<int> pos = {0, 5, 126, 127, 128, 300, 511};
  const int64_t B = static_cast<int64_t>(pos.size());
  std::mt19937 rng(7);
  for (int ratio : {0, 4, 128}) {
    for (bool csa : {false, true}) {
      if (csa && ratio != 4) continue;
      const int64_t entries = ratio > 0 ? max_len / ratio : 1;
      const auto q = to_device(random_values(B * H * d, 0.5f, 30 + ratio));
      const auto kv = to_device(random_values(B * d, 0.5f, 31 + ratio));
      const auto sink = to_device(random_values(H, 1.0f, 32));
      std::vector<DeviceBuffer<uint8_t>> ring, ring_ref, comp;  // FP8 caches
      std::vector<DecodeLayerCache> table_host(static_cast<size_t>(B));
      std::vector<int32_t> sel_host(static_cast<size_t>(B * topk), -1), cnt_host(static_cast<size_t>(B), 0);
      for (int64_t b = 0; b < B; ++b) {
        const auto r0 = fp8_cache(random_values(win * d, 0.5f, 500 + b));
        ring.push_back(to_device(r0));
        ring_ref.push_back(to_device(r0));
        comp.push_back(to_device(fp8_cache(random_values(entries * d, 0.5f, 600 + b))));
        table_host[b].window = ring.back().get();
        table_host[b].comp.cache = comp.back().get();
        if (csa) {
          const int64_t visible = (pos[b] + 1) / ratio;
          std::vector<int32_t> ids(static_cast<size_t>(visible));
          for (int64_t i = 0; i < visible; ++i) ids[i] = static_cast<int32_t>(i);
          std::shuffle(ids.begin(), ids.end(), rng);
          cnt_host[b] = static_cast<int32_t>(std::min<int64_t>(topk, visible));
          for (int i = 0; i < cnt_host[b]; ++i) sel_host[b * topk + i] = ids[i];
        }
      }
      const auto caches = to_device(table_host);
      const auto pos_dev = to_device(as_i32(pos));
      const auto sel = to_device(sel_host), cnt = to_device(cnt_host);
      DeviceBuffer<float> out(static_cast<size_t>(B * H * d)), out_ref(static_cast<size_t>(B * H * d));
      DecodeAttnArgs a;
      a.q = q.get();
      a.kv_new = kv.get();
      a.selected = csa ? sel.get() : nullptr;
      a.sel_count = csa ? cnt.get() : nullptr;
      a.sel_stride = topk;
      a.sink = sink.get();
      a.scale = 1.0f / std::sqrt(float(d));
      a.H = H;
      a.d = d;
      a.win = win;
      a.ratio = ratio;
      a.out = out.get();
      decode_sparse_attention(a, B, pos_dev.get(), caches.get(), nullptr);
      decode_ring_update(kv.get(), B, pos_dev.get(), caches.get(), win, d, nullptr);
      for (int64_t b = 0; b < B; ++b) {
        SparseAttnArgs r;
        r.q = q.get() + b * H * d;
        r.kv_new = kv.get() + b * d;
        r.ring = ring_ref[b].get();
        r.compressed = comp[b].get();
        r.selected = csa ? sel.get() + b * topk : nullptr;
        r.sel_count = csa ? cnt.get() + b : nullptr;
        r.sel_stride = topk;
        r.sink = sink.get();
        r.scale = a.scale;
        r.H = H;
        r.d = d;
        r.win = win;
        r.ratio = ratio;
        r.n = 1;
        r.start_pos = pos[b];
        r.window_len = win;
        r.out = out_ref.get() + b * H * d;
        sparse_attention(r, nullptr);
        window_ring_update(kv.get() + b * d, 1, pos[b], win, d, ring_ref[b].get(), nullptr);
      }
      const auto got = out.download(), want = out_ref.download();
      EXPECT_TRUE(same_bits(got, want)) << "ratio " << ratio << " csa " << csa;
      for (int64_t b = 0; b < B; ++b)
        EXPECT_TRUE(same_bits(ring[b].download(), ring_ref[b].download())) << "ring row " << b;
    }
  }
}

}  // namespace
}  // namespace dsv4::gpu
