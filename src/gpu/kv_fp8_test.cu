// The 584-byte FP8 KV cache codec (kv_fp8.h): (a) host codec and layout, CPU only — the
// Q8 simulation is idempotent for every possible tile maximum, so encoding a Q8-simulated row
// is lossless, and encoding a raw row stores its Q8 simulation (same codes and scales as
// numerics::quantize_q8); the CPU reference's own cached entries on the golden tiny models
// round-trip bit-exactly; (b) device codec and the kernels that write the GpuModel caches
// (kv_encode_rows, window_ring_update, compressor_finish), bitwise against the host codec and
// the fp32 values — skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cpu/model.h"
#include "gpu/cuda_check.h"
#include "gpu/kv_fp8.h"
#include "gpu/ops.h"
#include "numerics/formats.h"
#include "numerics/quant.h"

namespace dsv4::gpu {
namespace {

namespace fs = std::filesystem;
using numerics::e4m3_to_float;
using numerics::round_bf16;

#define SKIP_WITHOUT_GPU() \
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device"

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// n raw rows of 512 bf16 values; tile t of row r is of kind (r + 3t) % 9: all zero, tiny
// (amax < 1e-4: the floor scale), near the floor, max exactly ±448·2^k, max exactly ±224·2^k,
// normal, wide exponent, one huge value over tiny ones, mixed signed zeros. Rope dims normal.
std::vector<float> raw_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-20, 20);
  std::vector<float> x(static_cast<size_t>(n) * kKvDim);
  for (int64_t r = 0; r < n; ++r) {
    float* row = x.data() + r * kKvDim;
    for (int t = 0; t < kKvTiles; ++t) {
      float* tile = row + t * kKvTile;
      const int kind = static_cast<int>((r + 3 * t) % 9);
      const float big = std::ldexp(kind == 3 ? 448.0f : 224.0f, ex(rng));
      for (int i = 0; i < kKvTile; ++i) {
        float v = nd(rng);
        switch (kind) {
          case 0: v = 0.0f; break;
          case 1: v *= 0x1p-30f; break;
          case 2: v *= 3e-5f; break;
          case 3:
          case 4: v = std::clamp(v * big / 3.0f, -big, big); break;
          case 5: break;
          case 6: v *= std::ldexp(1.0f, ex(rng)); break;
          case 7: v = i == 5 ? 0x1p40f : v * 1e-3f; break;
          default: v = (i % 3 == 0) ? ((i & 1) ? -0.0f : 0.0f) : v; break;
        }
        tile[i] = round_bf16(v);
      }
      if (kind == 3 || kind == 4) tile[rng() % kKvTile] = (rng() & 1) ? -big : big;
    }
    for (int i = 0; i < kKvRopeDim; ++i) row[kKvNopeDim + i] = round_bf16(nd(rng) * ((i == 7) ? 1e20f : 1.0f));
  }
  return x;
}

// Q8 simulation of the no-rope dims of every row (what the model caches).
std::vector<float> simulated(std::vector<float> x) {
  for (size_t r = 0; r < x.size() / kKvDim; ++r) numerics::simulate_q8(std::span(x).subspan(r * kKvDim, kKvNopeDim), 64);
  return x;
}

std::vector<float> host_round_trip(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  uint8_t data[kKvEntryData], scales[kKvEntryScales];
  for (size_t r = 0; r < x.size() / kKvDim; ++r) {
    kv_encode_entry_host(x.data() + r * kKvDim, data, scales);
    kv_decode_entry_host(data, scales, y.data() + r * kKvDim);
  }
  return y;
}

// ---- (a) host ---------------------------------------------------------------------------

TEST(KvFp8Layout, PagesAndOffsets) {
  static_assert(kKvEntryBytes == 584 && kKvCachePageStride % kKvEntryData == 0);
  EXPECT_EQ(kKvCachePageStride, 37440);  // 64·584 = 37376, padded to 65·576
  EXPECT_EQ(kv_cache_bytes(0), 0);
  EXPECT_EQ(kv_cache_bytes(1), kKvCachePageStride);
  EXPECT_EQ(kv_cache_bytes(128), 2 * kKvCachePageStride);
  EXPECT_EQ(kv_cache_bytes(129), 3 * kKvCachePageStride);
  // Entries of a 200-entry cache: disjoint byte ranges inside kv_cache_bytes(200), aligned.
  const int64_t n = 200, bytes = kv_cache_bytes(n);
  std::vector<int> owner(static_cast<size_t>(bytes), -1);
  for (int64_t e = 0; e < n; ++e) {
    const int64_t d = kv_cache_data_offset(e), s = kv_cache_scale_offset(e);
    EXPECT_EQ(d % 16, 0);
    EXPECT_EQ(s % 8, 0);
    ASSERT_LE(d + kKvEntryData, bytes);
    ASSERT_LE(s + kKvEntryScales, bytes);
    for (int64_t i = 0; i < kKvEntryData; ++i) {
      ASSERT_EQ(owner[d + i], -1) << e;
      owner[d + i] = static_cast<int>(e);
    }
    for (int64_t i = 0; i < kKvEntryScales; ++i) {
      ASSERT_EQ(owner[s + i], -1) << e;
      owner[s + i] = static_cast<int>(e);
    }
  }
  const KvPool p = kv_cache_pool(nullptr);
  EXPECT_EQ(kv_data_offset(p, 77), kv_cache_data_offset(77));
  EXPECT_EQ(kv_scale_offset(p, 77), kv_cache_scale_offset(77));
}

// Every maximum a simulated tile can have: y = c·s with e4m3 codes c, max |c| = M ∈ [224, 448]
// for any scale s, or any M at the floor scale 2^-22. simulate(y) == y and decode(encode(y)) == y.
TEST(KvFp8Host, SimulationIsIdempotentForEveryTileMaximum) {
  std::mt19937 rng(5);
  int tiles = 0;
  for (int k = -22; k <= 24; ++k) {
    for (int top = 1; top <= 0x7e; ++top) {  // positive codes are ordered by magnitude
      const float m = e4m3_to_float(static_cast<uint8_t>(top));
      if (k > -22 && m < 224.0f) continue;  // not a simulation output
      std::vector<float> row(kKvDim, 0.0f);
      for (int t = 0; t < kKvTiles; ++t) {
        float* tile = row.data() + t * kKvTile;
        for (int i = 0; i < kKvTile; ++i) {
          const auto c = static_cast<uint8_t>(rng() % (top + 1) | ((rng() & 1) ? 0x80 : 0));
          tile[i] = std::ldexp(e4m3_to_float(c), k);
        }
        tile[rng() % kKvTile] = std::ldexp((rng() & 1) ? -m : m, k);
      }
      std::vector<float> again = row;
      numerics::simulate_q8(std::span(again).first(kKvNopeDim), 64);
      ASSERT_TRUE(same_bits(again, row)) << "simulate not idempotent: max code " << top << " scale 2^" << k;
      ASSERT_TRUE(same_bits(host_round_trip(row), row)) << "round trip: max code " << top << " scale 2^" << k;
      ++tiles;
    }
  }
  EXPECT_EQ(tiles, 126 + 46 * 9);  // every code at the floor scale; codes of [224, 448] at the others
}

TEST(KvFp8Host, EncodeStoresTheQ8Simulation) {
  const int64_t n = 300;
  const std::vector<float> x = raw_rows(n, 11), y = simulated(x);
  EXPECT_FALSE(same_bits(x, y));
  EXPECT_TRUE(same_bits(host_round_trip(x), y));  // raw rows: their simulation
  EXPECT_TRUE(same_bits(host_round_trip(y), y));  // simulated rows: exactly
  // Same codes and scales as the reference quantizer on raw rows.
  uint8_t data[kKvEntryData], scales[kKvEntryScales];
  std::vector<uint8_t> codes(kKvNopeDim);
  std::vector<float> ref_scales(kKvTiles);
  for (int64_t r = 0; r < n; ++r) {
    const std::span<const float> row(x.data() + r * kKvDim, kKvDim);
    kv_encode_entry_host(row.data(), data, scales);
    numerics::quantize_q8(row.first(kKvNopeDim), 64, codes, ref_scales);
    ASSERT_EQ(0, std::memcmp(data, codes.data(), kKvNopeDim)) << "row " << r;
    for (int t = 0; t < kKvTiles; ++t) ASSERT_EQ(std::ldexp(1.0f, scales[t] - 127), ref_scales[t]) << r << " " << t;
    EXPECT_EQ(scales[kKvTiles], 0);
  }
}

TEST(KvFp8Host, CacheImageDecodesInEntryOrder) {
  const int64_t n = 130;  // three pages
  const std::vector<float> y = simulated(raw_rows(n, 12));
  std::vector<uint8_t> cache(static_cast<size_t>(kv_cache_bytes(n)), 0xAB);
  for (int64_t e = 0; e < n; ++e)
    kv_encode_entry_host(y.data() + e * kKvDim, cache.data() + kv_cache_data_offset(e),
                         cache.data() + kv_cache_scale_offset(e));
  std::vector<float> out(y.size());
  kv_cache_decode_host(cache.data(), n, out.data());
  EXPECT_TRUE(same_bits(out, y));
}

fs::path golden_dir() {
  if (const char* env = std::getenv("DSV4_GOLDEN_DIR"); env != nullptr && *env != '\0') return env;
  if (fs::exists(DSV4_GOLDEN_DIR)) return DSV4_GOLDEN_DIR;
  return fs::path("tests") / "data" / "golden";
}

// The premise on real model data: every window slot and compressed entry the CPU reference
// caches (prefill past the window and a ratio-128 boundary, then decode steps) is a fixed
// point of the codec, so the GPU's FP8 caches hold exactly the reference's values.
TEST(KvFp8Host, CpuReferenceCachesRoundTripExactly) {
  for (const char* name : {"tiny-c4", "tiny-c4-w16"}) {
    const fs::path dir = golden_dir() / name;
    ASSERT_TRUE(fs::exists(dir / "config.json")) << dir;
    const auto m = cpu::CpuModel::load(dir);
    const auto& cfg = m->config();
    cpu::SequenceState st = m->new_sequence();
    std::vector<int32_t> prompt(260);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 3) % cfg.vocab_size);
    m->forward(st, prompt, false, static_cast<int64_t>(prompt.size()));
    for (int s = 0; s < 4; ++s) {
      const auto t = static_cast<int32_t>((s * 101 + 5) % cfg.vocab_size);
      m->forward(st, std::span(&t, 1));
    }
    int64_t entries = 0;
    auto expect_exact = [&](const float* x, const std::string& what) {
      const std::vector<float> v(x, x + kKvDim);
      ++entries;
      EXPECT_TRUE(same_bits(host_round_trip(v), v)) << name << " " << what;
    };
    for (int l = 0; l < cfg.num_layers(); ++l) {
      cpu::LayerState& ls = *st.layers[l];
      for (int64_t slot = 0; slot < std::min<int64_t>(st.length, cfg.sliding_window); ++slot)
        expect_exact(ls.window_slot(slot), "layer " + std::to_string(l) + " window slot " + std::to_string(slot));
      const int r = cfg.compress_ratio(l);
      for (int64_t e = 0; r > 0 && e < st.length / r; ++e)
        expect_exact(ls.compressed_entry(e), "layer " + std::to_string(l) + " compressed " + std::to_string(e));
    }
    EXPECT_GT(entries, 100) << name;
  }
}

// ---- (b) device -------------------------------------------------------------------------

std::vector<uint8_t> host_cache(const std::vector<float>& x, int64_t first, std::vector<uint8_t> cache) {
  for (int64_t r = 0; r < static_cast<int64_t>(x.size()) / kKvDim; ++r)
    kv_encode_entry_host(x.data() + r * kKvDim, cache.data() + kv_cache_data_offset(first + r),
                         cache.data() + kv_cache_scale_offset(first + r));
  return cache;
}

TEST(KvFp8Device, EncodeDecodeRowsMatchHostBitwise) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 333, first = 50, entries = first + n;
  for (bool sim : {true, false}) {
    const std::vector<float> x = sim ? simulated(raw_rows(n, 21)) : raw_rows(n, 22);
    const std::vector<uint8_t> blank(static_cast<size_t>(kv_cache_bytes(entries)), 0xAB);
    auto cache = to_device(blank);
    const auto dx = to_device(x);
    kv_encode_rows(dx.get(), n, cache.get(), first, nullptr);
    DeviceBuffer<float> out(x.size());
    kv_decode_rows(cache.get(), first, n, out.get(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(cache.download(), host_cache(x, first, blank)) << "simulated " << sim;
    EXPECT_TRUE(same_bits(out.download(), simulated(x))) << "simulated " << sim;
  }
}

// Prefill ring update past the window (n > win, wrapping), then one more token at its slot.
TEST(KvFp8Device, RingUpdateStoresRowsExactly) {
  SKIP_WITHOUT_GPU();
  const int win = 16;
  const int64_t start = 5, n = 20;
  const std::vector<float> kv = simulated(raw_rows(n + 1, 31));
  const std::vector<uint8_t> blank(static_cast<size_t>(kv_cache_bytes(win)), 0);
  auto ring = to_device(blank);
  const auto dkv = to_device(kv);
  window_ring_update(dkv.get(), n, start, win, kKvDim, ring.get(), nullptr);
  window_ring_update(dkv.get() + n * kKvDim, 1, start + n, win, kKvDim, ring.get(), nullptr);
  DeviceBuffer<float> out(static_cast<size_t>(win) * kKvDim);
  kv_decode_rows(ring.get(), 0, win, out.get(), nullptr);
  const std::vector<float> got = out.download();
  for (int64_t t = n + 1 - win; t <= n; ++t) {  // the last win tokens, token n last
    const int64_t slot = (start + t) % win;
    EXPECT_TRUE(same_bits(std::span(got).subspan(slot * kKvDim, kKvDim), std::span(kv).subspan(t * kKvDim, kKvDim)))
        << "token " << t;
  }
}

// The attention compressor's finish: the FP8 entries hold exactly the finished fp32 rows
// (Q8-simulated in place in the staging rows).
TEST(KvFp8Device, CompressorFinishStoresFinishedRowsExactly) {
  SKIP_WITHOUT_GPU();
  const int64_t first = 3, count = 70, max_len = 512;
  const int ratio = 4, pairs = kKvRopeDim / 2;
  std::mt19937 rng(41);
  std::normal_distribution<float> nd;
  std::vector<float> raw(static_cast<size_t>(count) * kKvDim), norm(kKvDim), table(max_len * pairs * 2);
  for (float& v : raw) v = nd(rng) * 3.0f;
  for (float& v : norm) v = round_bf16(1.0f + 0.1f * nd(rng));
  for (size_t i = 0; i < table.size(); i += 2) {
    const float a = nd(rng);
    table[i] = std::cos(a);
    table[i + 1] = std::sin(a);
  }
  auto rows = to_device(raw);
  const auto dnorm = to_device(norm), dtable = to_device(table);
  auto cache = to_device(std::vector<uint8_t>(static_cast<size_t>(kv_cache_bytes(first + count)), 0xAB));
  compressor_finish(rows.get(), first, count, kKvDim, dnorm.get(), 1e-6f, ratio, dtable.get(), pairs, cache.get(),
                    nullptr);
  DeviceBuffer<float> out(raw.size());
  kv_decode_rows(cache.get(), first, count, out.get(), nullptr);
  const std::vector<float> finished = rows.download();
  EXPECT_FALSE(same_bits(finished, raw));
  EXPECT_TRUE(same_bits(out.download(), finished));
  EXPECT_TRUE(same_bits(simulated(finished), finished));  // the rows are Q8-simulated
}

}  // namespace
}  // namespace dsv4::gpu
