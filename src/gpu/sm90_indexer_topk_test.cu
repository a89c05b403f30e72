// Tests of the sm_90a lightning indexer (scores + top-k, sm90_indexer_topk.h) against the CPU
// reference (cpu::index_scores, cpu::select_topk) on fresh random inputs. Skipped without a CUDA
// device. The scores must match cpu::index_scores on all but ≤ 0.1% of keys (tensor-core dots sum
// in another order; with FP4-simulated operands they are exact in practice) for 8 and 64 heads,
// top-4 and top-512, and the selection must equal select_topk of the GPU scores exactly (ties →
// lower id); rows of up to 262,144 keys (1M tokens) for the selection alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu/indexer.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "gpu/sm90_indexer_topk.h"
#include "gpu/sparse_decode.h"
#include "numerics/formats.h"
#include "numerics/quant.h"

namespace dsv4::gpu::sm90 {
namespace {

using numerics::round_bf16;

// Key pool adapter for cpu::index_scores.
class KeyPool : public cpu::LayerState {
 public:
  explicit KeyPool(const float* keys) : keys_(keys) {}
  float* window_slot(int64_t) override { return nullptr; }
  float* compressed_entry(int64_t) override { return nullptr; }
  float* index_key(int64_t e) override { return const_cast<float*>(keys_ + e * kIndexDim); }
  cpu::CompressorStateRef compressor(bool) override { return {}; }

 private:
  const float* keys_;
};

struct IndexerCase {
  const char* name;
  int heads, k;
  // 0: bf16 q and per-row key pools (key_base), explicit visible counts; 1: GpuModel decode
  // (fp32 q, per-row key buffers caches[r].index.keys, visible from positions); 2: GpuModel
  // prefill (as 1, but one key pool shared by every row: key_base null).
  int mode;
};

class Sm90IndexerTopk : public ::testing::TestWithParam<IndexerCase> {};

TEST_P(Sm90IndexerTopk, ScoresAndSelectionMatchCpuReference) {
  SKIP_WITHOUT_GPU();
  const IndexerCase c = GetParam();
  const int HI = c.heads, K = c.k, ratio = 4;
  std::mt19937 rng(99 + HI + K);
  std::normal_distribution<float> nd;
  const std::vector<int> visible = {1, 3, 4, 5, 300, 512, 513, 5000, 32768, 2048, 0};
  const int rows = int(visible.size());
  const int max_visible = *std::max_element(visible.begin(), visible.end());
  // One key pool per row (a sequence each), FP4-simulated values; the row before last has many
  // ties.
  std::vector<int64_t> base(rows);
  int64_t total = 0;
  for (int r = 0; r < rows; ++r) base[r] = c.mode == 2 ? 0 : total, total += visible[r];
  if (c.mode == 2) total = max_visible;
  std::vector<float> keys(total * kIndexDim), q(size_t(rows) * HI * kIndexDim),
      w(size_t(rows) * HI);
  for (float& v : keys) v = round_bf16(nd(rng));
  const int tie_row = rows - 2;
  for (int64_t e = base[tie_row]; e < base[tie_row] + visible[tie_row]; ++e)  // 16 keys repeated
    std::copy_n(&keys[(base[tie_row] + e % 16) * kIndexDim], kIndexDim, &keys[e * kIndexDim]);
  for (float& v : q) v = round_bf16(nd(rng));
  for (size_t i = 0; i < keys.size(); i += 32) numerics::simulate_q4(std::span(&keys[i], 32), 32);
  for (size_t i = 0; i < q.size(); i += 32) numerics::simulate_q4(std::span(&q[i], 32), 32);
  const float ws = float(std::pow(128.0, -0.5) * std::pow(double(HI), -0.5));
  for (float& v : w) v = round_bf16(round_bf16(nd(rng)) * ws);

  DeviceBuffer<uint16_t> d_keys, d_q;
  DeviceBuffer<float> d_q32, d_w;
  d_w.upload(w);
  DeviceBuffer<int64_t> d_base;
  DeviceBuffer<int32_t> d_vis, d_pos, d_topk(size_t(rows) * K), d_count(rows);
  DeviceBuffer<DecodeLayerCache> d_table;
  DeviceBuffer<uint8_t> work(indexer_workspace_bytes(rows, max_visible));
  IndexerArgs a;
  a.heads = HI;
  a.weights = d_w.get();
  a.rows = rows;
  a.max_visible = max_visible;
  a.k = K;
  a.topk = d_topk.get();
  a.count = d_count.get();
  d_keys.upload(to_bf16_bits(keys));
  if (c.mode != 0) {
    d_q32.upload(q);
    std::vector<DecodeLayerCache> table(rows);
    std::vector<int32_t> pos(rows);
    for (int r = 0; r < rows; ++r) {
      table[r].index.keys = d_keys.get() + base[r] * kIndexDim;
      // (pos + 1) / 4 = visible
      pos[r] =
          visible[r] > 0 ? visible[r] * ratio - 1 + int(rng() % ratio) : int(rng() % (ratio - 1));
    }
    d_table.upload(table);
    d_pos.upload(pos);
    a.q_f32 = d_q32.get();
    if (c.mode == 1)
      a.caches = d_table.get();
    else
      a.keys = reinterpret_cast<const __nv_bfloat16*>(d_keys.get());
    a.pos = d_pos.get();
    a.ratio = ratio;
  } else {
    d_q.upload(to_bf16_bits(q));
    d_base.upload(base);
    d_vis.upload(visible);
    a.q = reinterpret_cast<const __nv_bfloat16*>(d_q.get());
    a.keys = reinterpret_cast<const __nv_bfloat16*>(d_keys.get());
    a.key_base = d_base.get();
    a.visible = d_vis.get();
  }
  indexer_topk(a, work.get(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> topk = d_topk.download(), count = d_count.download();
  std::vector<uint16_t> score_keys(work.size() / 2);
  CUDA_CHECK(
      cudaMemcpy(score_keys.data(), work.get(), score_keys.size() * 2, cudaMemcpyDeviceToHost));

  cpu::IndexerParams ip;
  ip.num_heads = HI;
  for (int r = 0; r < rows; ++r) {
    KeyPool pool(&keys[base[r] * kIndexDim]);
    std::vector<float> ref(visible[r]), gpu(visible[r]);
    cpu::index_scores(std::span(&q[size_t(r) * HI * kIndexDim], size_t(HI) * kIndexDim),
                      std::span(&w[size_t(r) * HI], HI),
                      pool,
                      visible[r],
                      ip,
                      ref);
    int64_t score_diff = 0;
    for (int i = 0; i < visible[r]; ++i) {
      gpu[i] = numerics::bf16_bits_to_float(
          score_from_key(indexer_score_keys(score_keys.data(), r, max_visible)[i]));
      score_diff += gpu[i] != ref[i] && !(gpu[i] == 0 && ref[i] == 0);
    }
    const std::vector<int32_t> sel_ref = cpu::select_topk(ref, K);
    const std::vector<int32_t> sel_gpu_scores = cpu::select_topk(gpu, K);
    const int take = int(sel_ref.size());
    ASSERT_EQ(count[r], take) << "row " << r;
    std::vector<int32_t> got(topk.begin() + size_t(r) * K, topk.begin() + size_t(r) * K + take);
    for (int i = take; i < K; ++i) EXPECT_EQ(topk[size_t(r) * K + i], -1);
    EXPECT_EQ(got, sel_gpu_scores) << "row " << r;  // selection logic: exact, ties → lower id
    std::vector<int32_t> a1 = got, b1 = sel_ref;
    std::sort(a1.begin(), a1.end());
    std::sort(b1.begin(), b1.end());
    std::vector<int32_t> common;
    std::set_intersection(a1.begin(), a1.end(), b1.begin(), b1.end(), std::back_inserter(common));
    std::printf(
        "[%s] indexer row %d visible %d: scores differing from cpu %lld, selection agreement "
        "%.2f%% (same order: %s)\n",
        c.name,
        r,
        visible[r],
        (long long)score_diff,
        take ? 100.0 * common.size() / take : 100.0,
        got == sel_ref ? "yes" : "no");
    EXPECT_LE(score_diff, visible[r] / 1000);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases,
                         Sm90IndexerTopk,
                         ::testing::Values(IndexerCase{"h64_top512", 64, 512, false},
                                           IndexerCase{"h8_top512", 8, 512, false},
                                           IndexerCase{"h8_top4", 8, 4, false},
                                           IndexerCase{"h64_top4", 64, 4, false},
                                           IndexerCase{"decode_h64_top512", 64, 512, true},
                                           IndexerCase{"decode_h8_top4", 8, 4, true},
                                           IndexerCase{"decode_h8_top512", 8, 512, true},
                                           IndexerCase{"prefill_h64_top512", 64, 512, 2},
                                           IndexerCase{"prefill_h8_top4", 8, 4, 2}),
                         [](const auto& info) { return std::string(info.param.name); });

// Long rows (up to a 1M-token context's 262,144 keys), the selection alone: the selection must
// equal select_topk of the GPU's own scores exactly. 6 rows give the selection 8 CTAs a row
// (every key of a CTA in registers); 48 rows give it 2, so the longest row's threads re-read
// their 128 keys per pass. One row reads a region of 100 keys repeated: its top score has ~655
// copies spread over the row, so the 512 lowest ids of them (ids up to ~51,200) come from 7 of
// its 8 CTAs (both of 2).
struct LongRowsCase {
  const char* name;
  int rows, k;
};

class Sm90IndexerLongRows : public ::testing::TestWithParam<LongRowsCase> {};

TEST_P(Sm90IndexerLongRows, SelectionIsExact) {
  SKIP_WITHOUT_GPU();
  const LongRowsCase c = GetParam();
  constexpr int kHeads = 8, kRandomKeys = 262144, kTieKeys = 65536;
  std::mt19937 rng(7 + c.rows + c.k);
  std::normal_distribution<float> nd;
  std::vector<float> keys(size_t(kRandomKeys + kTieKeys) * kIndexDim);
  for (size_t i = 0; i < size_t(kRandomKeys) * kIndexDim; ++i) keys[i] = round_bf16(nd(rng));
  for (int e = 0; e < kTieKeys; ++e)  // 100 keys repeated: ~655 copies of each over the whole row
    std::copy_n(&keys[size_t(e % 100) * kIndexDim], kIndexDim, &keys[size_t(kRandomKeys + e) * kIndexDim]);
  for (size_t i = 0; i < keys.size(); i += 32) numerics::simulate_q4(std::span(&keys[i], 32), 32);
  std::vector<int32_t> visible(c.rows);
  std::vector<int64_t> base(c.rows);
  for (int r = 0; r < c.rows; ++r) {
    visible[r] = r == 0 ? kRandomKeys : r == 1 ? kTieKeys : int(600 + rng() % 140000);
    base[r] = r == 1 ? kRandomKeys : r == 0 ? 0 : int64_t(rng() % (kRandomKeys - visible[r]));
  }
  std::vector<float> q(size_t(c.rows) * kHeads * kIndexDim), w(size_t(c.rows) * kHeads);
  for (float& v : q) v = round_bf16(nd(rng));
  for (size_t i = 0; i < q.size(); i += 32) numerics::simulate_q4(std::span(&q[i], 32), 32);
  for (float& v : w) v = round_bf16(nd(rng) * 0.03f);
  DeviceBuffer<uint16_t> d_keys, d_q;
  d_keys.upload(to_bf16_bits(keys));
  d_q.upload(to_bf16_bits(q));
  DeviceBuffer<float> d_w;
  d_w.upload(w);
  DeviceBuffer<int64_t> d_base;
  d_base.upload(base);
  DeviceBuffer<int32_t> d_vis, d_topk(size_t(c.rows) * c.k), d_count(c.rows);
  d_vis.upload(visible);
  const int max_visible = *std::max_element(visible.begin(), visible.end());
  DeviceBuffer<uint8_t> work(indexer_workspace_bytes(c.rows, max_visible));
  IndexerArgs a;
  a.heads = kHeads;
  a.q = reinterpret_cast<const __nv_bfloat16*>(d_q.get());
  a.weights = d_w.get();
  a.keys = reinterpret_cast<const __nv_bfloat16*>(d_keys.get());
  a.key_base = d_base.get();
  a.visible = d_vis.get();
  a.rows = c.rows;
  a.max_visible = max_visible;
  a.k = c.k;
  a.topk = d_topk.get();
  a.count = d_count.get();
  indexer_topk(a, work.get(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> topk = d_topk.download(), count = d_count.download();
  std::vector<uint16_t> score_keys(work.size() / 2);
  CUDA_CHECK(cudaMemcpy(score_keys.data(), work.get(), score_keys.size() * 2, cudaMemcpyDeviceToHost));
  int64_t tied_picks = 0;
  for (int r = 0; r < c.rows; ++r) {
    const uint16_t* sk = indexer_score_keys(score_keys.data(), r, max_visible);
    std::vector<float> gpu(visible[r]);
    for (int i = 0; i < visible[r]; ++i) gpu[i] = numerics::bf16_bits_to_float(score_from_key(sk[i]));
    const std::vector<int32_t> want = cpu::select_topk(gpu, c.k);
    const int take = int(want.size());
    ASSERT_EQ(count[r], take) << "row " << r;
    std::vector<int32_t> got(topk.begin() + size_t(r) * c.k, topk.begin() + size_t(r) * c.k + take);
    EXPECT_EQ(got, want) << "row " << r << " visible " << visible[r];
    for (int i = take; i < c.k; ++i) EXPECT_EQ(topk[size_t(r) * c.k + i], -1) << "row " << r;
    if (r == 1)
      for (int32_t id : want) tied_picks += gpu[id] == gpu[want.back()];
  }
  std::printf("[%s] %d rows, longest %d keys; tie row: %lld picks at the threshold score\n", c.name, c.rows,
              max_visible, (long long)tied_picks);
  EXPECT_GT(tied_picks, 1);  // the tie row does tie at its threshold
}

INSTANTIATE_TEST_SUITE_P(Cases,
                         Sm90IndexerLongRows,
                         ::testing::Values(LongRowsCase{"rows6_top512", 6, 512}, LongRowsCase{"rows6_top37", 6, 37},
                                           LongRowsCase{"rows48_top512", 48, 512}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dsv4::gpu::sm90
