// Tests of the sm_90a sparse decode attention, its FP8 KV pool and the indexer top-k against
// the CPU reference (cpu::sparse_attention_head, cpu::index_scores, cpu::select_topk) on fresh
// random inputs. Skipped without a CUDA device.
//
// Tolerance of the attention (split-K regroups the reference's 64-candidate online-softmax
// blocks and tensor cores reorder fp32 sums, so bits differ at bf16-rounding level):
//   |gpu − ref| ≤ 1e-3 + 1e-2·(|ref| + A), A = Σ_j p_j |v_j| / (Σ_j p_j + e^sink) (fp64), against
//   both the CPU reference and an fp64 softmax (unrounded probabilities). A bounds the
//   cancellation in Σ p·v, where bf16 rounding of p (2^-9 relative) and of the output act;
//   observed errors are ≤ 1 bf16 ulp of the magnitudes involved. The KV dequantization and the indexer scores are checked bit
//   for bit; the indexer selection must equal select_topk of the GPU scores exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "cpu/indexer.h"
#include "gpu/cuda_check.h"
#include "gpu/sm90_indexer_topk.h"
#include "gpu/sparse_decode.h"
#include "numerics/formats.h"
#include "numerics/quant.h"

namespace dsv4::gpu::sm90 {
namespace {

using numerics::round_bf16;

#define REQUIRE_GPU() \
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device"

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = numerics::float_to_bf16_bits(v[i]);
  return b;
}

// n KV entries of reference values: bf16 normal(0, σ_tile) with σ per 64-tile drawn from a wide
// range (tiny tiles exercise the amax ≥ 1e-4 clamp), then Q8-simulated on the 448 nope dims.
std::vector<float> random_kv(int64_t n, std::mt19937& rng, bool simulate) {
  std::vector<float> kv(n * kHeadDim);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-20, 2);
  for (int64_t e = 0; e < n; ++e) {
    for (int t = 0; t < 8; ++t) {
      const float sigma = (t == 7 || rng() % 4 != 0) ? 1.0f : std::ldexp(1.0f, ex(rng));
      for (int i = 0; i < 64; ++i) kv[e * kHeadDim + t * 64 + i] = round_bf16(nd(rng) * sigma);
    }
    if (rng() % 16 == 0) std::fill_n(&kv[e * kHeadDim], 64, 0.0f);  // an all-zero tile
    if (simulate) numerics::simulate_q8(std::span(&kv[e * kHeadDim], kNopeDim), 64);
  }
  return kv;
}

struct PoolOnDevice {
  KvPool pool;
  DeviceBuffer<uint8_t> bytes;
};

PoolOnDevice make_pool(const std::vector<float>& kv, int page_size, std::mt19937& rng,
                       std::vector<int32_t>& slot_of_entry) {
  const int64_t n = int64_t(kv.size()) / kHeadDim;
  PoolOnDevice p;
  p.pool.page_size = page_size;
  p.pool.page_stride = kv_page_stride(page_size);
  p.bytes.resize(size_t(kv_pool_bytes(n, page_size)));
  p.bytes.fill_bytes(0xAB);
  p.pool.base = p.bytes.get();
  slot_of_entry.resize(n);
  std::iota(slot_of_entry.begin(), slot_of_entry.end(), 0);
  std::shuffle(slot_of_entry.begin(), slot_of_entry.end(), rng);
  DeviceBuffer<float> d_kv;
  d_kv.upload(kv);
  DeviceBuffer<int32_t> d_slots;
  d_slots.upload(slot_of_entry);
  kv_cache_insert(d_kv.get(), d_slots.get(), n, p.pool, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return p;
}

TEST(Sm90KvPool, InsertDequantizesToReferenceQ8Values) {
  REQUIRE_GPU();
  std::mt19937 rng(7);
  const int64_t n = 1000;
  std::vector<float> kv = random_kv(n, rng, /*simulate=*/false);
  std::vector<int32_t> slot;
  PoolOnDevice p = make_pool(kv, 64, rng, slot);
  const std::vector<uint8_t> bytes = p.bytes.download();
  int64_t mismatches = 0;
  for (int64_t e = 0; e < n; ++e) {
    std::vector<float> ref(kv.begin() + e * kHeadDim, kv.begin() + (e + 1) * kHeadDim);
    numerics::simulate_q8(std::span(ref).first(kNopeDim), 64);
    const uint8_t* d = bytes.data() + kv_data_offset(p.pool, slot[e]);
    const uint8_t* s = bytes.data() + kv_scale_offset(p.pool, slot[e]);
    for (int i = 0; i < kNopeDim; ++i) {
      const float v = numerics::e4m3_to_float(d[i]) * std::ldexp(1.0f, int(s[i / 64]) - 127);
      mismatches += v != ref[i];
    }
    for (int i = 0; i < kRopeDim; ++i) {
      const uint16_t b = uint16_t(d[kNopeDim + 2 * i] | (d[kNopeDim + 2 * i + 1] << 8));
      mismatches += numerics::bf16_bits_to_float(b) != ref[kNopeDim + i];
    }
    EXPECT_EQ(s[7], 0);
  }
  EXPECT_EQ(mismatches, 0);
}

struct AttnCase {
  const char* name;
  int rows, max_main, max_extra;
  bool random_lengths;  // else every row has max_main + max_extra
  double neg_frac;      // fraction of −1 ids
  int min_chunk;
};

class Sm90SparseDecode : public ::testing::TestWithParam<AttnCase> {};

TEST_P(Sm90SparseDecode, MatchesCpuReferenceAndFp64) {
  REQUIRE_GPU();
  const AttnCase c = GetParam();
  std::mt19937 rng(1234 + c.rows * 7 + c.max_extra);
  const int64_t n_main = std::max(1, c.max_main) * 2, n_extra = std::max(1, c.max_extra) + 64;
  const std::vector<float> kv_main = random_kv(n_main, rng, true);
  const std::vector<float> kv_extra = random_kv(n_extra, rng, true);
  std::vector<int32_t> slot_main, slot_extra;
  PoolOnDevice pm = make_pool(kv_main, 64, rng, slot_main);
  PoolOnDevice pe = make_pool(kv_extra, 32, rng, slot_extra);

  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<float> q(size_t(c.rows) * kHeads * kHeadDim);
  for (float& v : q) v = round_bf16(2.5f * nd(rng));
  std::vector<float> sink(kHeads);
  for (float& v : sink) v = 4.0f * ud(rng) - 2.0f;
  // Lists: entry numbers (host), translated to pool slots for the device.
  std::vector<int32_t> main_e(size_t(c.rows) * std::max(1, c.max_main), -1);
  std::vector<int32_t> extra_e(size_t(c.rows) * std::max(1, c.max_extra), -1);
  std::vector<int32_t> main_len(c.rows), extra_len(c.rows);
  for (int r = 0; r < c.rows; ++r) {
    main_len[r] = c.random_lengths ? int(rng() % (c.max_main + 1)) : c.max_main;
    extra_len[r] = c.random_lengths && c.max_extra > 0 ? int(rng() % (c.max_extra + 1)) : c.max_extra;
    if (main_len[r] + extra_len[r] == 0) main_len[r] = std::min(1, c.max_main);
    for (int j = 0; j < main_len[r]; ++j)
      main_e[r * std::max(1, c.max_main) + j] = ud(rng) < c.neg_frac ? -1 : int(rng() % n_main);
    for (int j = 0; j < extra_len[r]; ++j)
      extra_e[r * std::max(1, c.max_extra) + j] = ud(rng) < c.neg_frac ? -1 : int(rng() % n_extra);
  }
  if (c.rows > 2) std::fill_n(main_e.begin(), main_len[0], -1), std::fill_n(extra_e.begin(), extra_len[0], -1);
  auto to_slots = [](std::vector<int32_t> ids, const std::vector<int32_t>& slot) {
    for (int32_t& v : ids) v = v < 0 ? -1 : slot[v];
    return ids;
  };
  DeviceBuffer<uint16_t> d_q;
  d_q.upload(to_bf16_bits(q));
  DeviceBuffer<float> d_sink;
  d_sink.upload(sink);
  DeviceBuffer<int32_t> d_mi, d_ei, d_ml, d_el;
  d_mi.upload(to_slots(main_e, slot_main));
  d_ei.upload(to_slots(extra_e, slot_extra));
  d_ml.upload(main_len);
  d_el.upload(extra_len);
  DeviceBuffer<uint16_t> d_out(size_t(c.rows) * kHeads * kHeadDim);
  SparseDecodeArgs a;
  a.q = reinterpret_cast<const __nv_bfloat16*>(d_q.get());
  a.main_pool = pm.pool;
  a.main_idx = d_mi.get();
  a.main_len = d_ml.get();
  a.main_stride = std::max(1, c.max_main);
  if (c.max_extra > 0) {
    a.extra_pool = pe.pool;
    a.extra_idx = d_ei.get();
    a.extra_len = d_el.get();
    a.extra_stride = c.max_extra;
  }
  a.sink = d_sink.get();
  a.out = reinterpret_cast<__nv_bfloat16*>(d_out.get());
  a.rows = c.rows;
  const SparseDecodePlan plan = plan_sparse_decode(c.rows, c.max_main, c.max_extra, 132, c.min_chunk);
  DeviceBuffer<uint8_t> ws(std::max<size_t>(plan.workspace_bytes, 1));
  sparse_decode(a, plan, ws.get(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> out = d_out.download();

  const float scale = a.scale;
  double max_err_ref = 0, max_err_f64 = 0, max_abs_ref = 0;
  int64_t bad = 0, equal_bits = 0;
  std::vector<float> ref(kHeadDim);
  std::vector<double> f64(kHeadDim), f64abs(kHeadDim);
  for (int r = 0; r < c.rows; ++r) {
    std::vector<const float*> cand;
    for (int j = 0; j < main_len[r]; ++j) {
      const int32_t e = main_e[r * a.main_stride + j];
      cand.push_back(e < 0 ? nullptr : &kv_main[e * kHeadDim]);
    }
    for (int j = 0; j < extra_len[r]; ++j) {
      const int32_t e = extra_e[r * std::max(1, c.max_extra) + j];
      cand.push_back(e < 0 ? nullptr : &kv_extra[e * kHeadDim]);
    }
    for (int h = 0; h < kHeads; ++h) {
      const float* qh = &q[(size_t(r) * kHeads + h) * kHeadDim];
      cpu::sparse_attention_head(std::span(qh, kHeadDim), cand, sink[h], scale, ref);
      // fp64 softmax with unrounded probabilities.
      std::vector<double> s(cand.size());
      double m = -INFINITY;
      for (size_t j = 0; j < cand.size(); ++j) {
        if (!cand[j]) continue;
        double dot = 0;
        for (int k = 0; k < kHeadDim; ++k) dot += double(qh[k]) * cand[j][k];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      std::fill(f64.begin(), f64.end(), 0.0);
      std::fill(f64abs.begin(), f64abs.end(), 0.0);
      double l = 0;
      for (size_t j = 0; j < cand.size(); ++j) {
        if (!cand[j]) continue;
        const double p = std::exp(s[j] - m);
        l += p;
        for (int k = 0; k < kHeadDim; ++k) {
          f64[k] += p * cand[j][k];
          f64abs[k] += p * std::fabs(cand[j][k]);
        }
      }
      const double denom = m == -INFINITY ? INFINITY : l + std::exp(double(sink[h]) - m);
      for (int k = 0; k < kHeadDim; ++k) {
        const float g = numerics::bf16_bits_to_float(out[(size_t(r) * kHeads + h) * kHeadDim + k]);
        const double exact = f64[k] / denom;
        const double e1 = std::fabs(g - ref[k]), e2 = std::fabs(g - exact);
        max_err_ref = std::max(max_err_ref, e1);
        max_err_f64 = std::max(max_err_f64, e2);
        max_abs_ref = std::max(max_abs_ref, double(std::fabs(ref[k])));
        equal_bits += g == ref[k];
        const double tol = 1e-3 + 1e-2 * (std::fabs(exact) + f64abs[k] / denom);
        bad += e1 > tol || e2 > tol;
      }
    }
  }
  const double n = double(c.rows) * kHeads * kHeadDim;
  std::printf("[%s] rows %d chunk %d splits %d: max|gpu-cpu| %.3g, max|gpu-fp64| %.3g "
              "(max|ref| %.3g), bit-equal to cpu %.2f%%, out of tolerance %lld\n",
              c.name, c.rows, plan.chunk, plan.splits, max_err_ref, max_err_f64, max_abs_ref,
              100.0 * equal_bits / n, (long long)bad);
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Sm90SparseDecode,
    ::testing::Values(AttnCase{"csa_b1", 1, 128, 512, false, 0.0, 16},
                      AttnCase{"csa_b1_chunk64", 1, 128, 512, false, 0.0, 64},
                      AttnCase{"csa_b1_one_split", 1, 128, 512, false, 0.0, 640},
                      AttnCase{"mixed_len_pad", 5, 128, 512, true, 0.1, 16},
                      AttnCase{"csa_b64_pad", 64, 128, 512, true, 0.05, 16},
                      AttnCase{"window_only", 9, 128, 0, true, 0.1, 16},
                      AttnCase{"len1", 2, 1, 0, false, 0.0, 16},
                      AttnCase{"hca_8192", 2, 128, 8192, false, 0.02, 16},
                      AttnCase{"hca_8192_b16", 16, 128, 8192, true, 0.0, 16}),
    [](const auto& info) { return std::string(info.param.name); });

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

TEST(Sm90IndexerTopk, ScoresAndSelectionMatchCpuReference) {
  REQUIRE_GPU();
  std::mt19937 rng(99);
  std::normal_distribution<float> nd;
  const std::vector<int> visible = {1, 300, 512, 513, 5000, 32768, 2048};
  const int rows = int(visible.size());
  const int max_visible = *std::max_element(visible.begin(), visible.end());
  // One key pool per row (a sequence each), FP4-simulated values; the last row has many ties.
  std::vector<int64_t> base(rows);
  int64_t total = 0;
  for (int r = 0; r < rows; ++r) base[r] = total, total += visible[r];
  std::vector<float> keys(total * kIndexDim), q(size_t(rows) * kIndexHeads * kIndexDim),
      w(size_t(rows) * kIndexHeads);
  for (float& v : keys) v = round_bf16(nd(rng));
  for (int64_t e = base[rows - 1]; e < total; ++e)  // 16 distinct keys repeated: exact ties
    std::copy_n(&keys[(base[rows - 1] + e % 16) * kIndexDim], kIndexDim, &keys[e * kIndexDim]);
  for (float& v : q) v = round_bf16(nd(rng));
  for (size_t i = 0; i < keys.size(); i += 32) numerics::simulate_q4(std::span(&keys[i], 32), 32);
  for (size_t i = 0; i < q.size(); i += 32) numerics::simulate_q4(std::span(&q[i], 32), 32);
  const float ws = float(std::pow(128.0, -0.5) * std::pow(64.0, -0.5));
  for (float& v : w) v = round_bf16(round_bf16(nd(rng)) * ws);

  DeviceBuffer<uint16_t> d_keys, d_q;
  d_keys.upload(to_bf16_bits(keys));
  d_q.upload(to_bf16_bits(q));
  DeviceBuffer<float> d_w;
  d_w.upload(w);
  DeviceBuffer<int64_t> d_base;
  d_base.upload(base);
  DeviceBuffer<int32_t> d_vis, d_topk(size_t(rows) * kIndexTopk), d_count(rows);
  d_vis.upload(visible);
  DeviceBuffer<uint8_t> work(indexer_workspace_bytes(rows, max_visible));
  IndexerArgs a;
  a.q = reinterpret_cast<const __nv_bfloat16*>(d_q.get());
  a.weights = d_w.get();
  a.keys = reinterpret_cast<const __nv_bfloat16*>(d_keys.get());
  a.key_base = d_base.get();
  a.visible = d_vis.get();
  a.rows = rows;
  a.max_visible = max_visible;
  a.topk = d_topk.get();
  a.count = d_count.get();
  indexer_topk(a, work.get(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> topk = d_topk.download(), count = d_count.download();
  std::vector<uint16_t> score_keys(work.size() / 2);
  CUDA_CHECK(cudaMemcpy(score_keys.data(), work.get(), score_keys.size() * 2, cudaMemcpyDeviceToHost));

  cpu::IndexerParams ip;
  for (int r = 0; r < rows; ++r) {
    KeyPool pool(&keys[base[r] * kIndexDim]);
    std::vector<float> ref(visible[r]), gpu(visible[r]);
    cpu::index_scores(std::span(&q[size_t(r) * kIndexHeads * kIndexDim], kIndexHeads * kIndexDim),
                      std::span(&w[size_t(r) * kIndexHeads], kIndexHeads), pool, visible[r], ip, ref);
    int64_t score_diff = 0;
    for (int i = 0; i < visible[r]; ++i) {
      gpu[i] = numerics::bf16_bits_to_float(
          score_from_key(indexer_score_keys(score_keys.data(), r, max_visible)[i]));
      score_diff += gpu[i] != ref[i] && !(gpu[i] == 0 && ref[i] == 0);
    }
    const std::vector<int32_t> sel_ref = cpu::select_topk(ref, kIndexTopk);
    const std::vector<int32_t> sel_gpu_scores = cpu::select_topk(gpu, kIndexTopk);
    const int take = int(sel_ref.size());
    ASSERT_EQ(count[r], take);
    std::vector<int32_t> got(topk.begin() + r * kIndexTopk, topk.begin() + r * kIndexTopk + take);
    for (int i = take; i < kIndexTopk; ++i) EXPECT_EQ(topk[r * kIndexTopk + i], -1);
    EXPECT_EQ(got, sel_gpu_scores) << "row " << r;  // selection logic: exact, ties → lower id
    std::vector<int32_t> a1 = got, b1 = sel_ref;
    std::sort(a1.begin(), a1.end());
    std::sort(b1.begin(), b1.end());
    std::vector<int32_t> common;
    std::set_intersection(a1.begin(), a1.end(), b1.begin(), b1.end(), std::back_inserter(common));
    std::printf("indexer row %d visible %d: scores differing from cpu %lld, selection agreement "
                "%.2f%% (same order: %s)\n",
                r, visible[r], (long long)score_diff, take ? 100.0 * common.size() / take : 100.0,
                got == sel_ref ? "yes" : "no");
    EXPECT_LE(score_diff, visible[r] / 1000);
  }
}

}  // namespace
}  // namespace dsv4::gpu::sm90
