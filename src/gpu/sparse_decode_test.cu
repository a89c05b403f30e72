// Tests of the sm_90a sparse decode attention and its FP8 KV pool against the CPU reference
// (cpu::sparse_attention_head) on fresh random inputs. Skipped without a CUDA device.
//
// Tolerance of the attention (split-K regroups the reference's 64-candidate online-softmax
// blocks and tensor cores reorder fp32 sums, so bits differ at bf16-rounding level):
//   |gpu − ref| ≤ 1e-3 + 1e-2·(|ref| + A), A = Σ_j p_j |v_j| / (Σ_j p_j + e^sink) (fp64), against
//   both the CPU reference and an fp64 softmax (unrounded probabilities). A bounds the
//   cancellation in Σ p·v, where bf16 rounding of p (2^-9 relative) and of the output act;
//   observed errors are ≤ 1 bf16 ulp of the magnitudes involved; every output must also be a
//   bf16 value (probabilities are rounded to bf16 before P·V like the reference, outputs to
//   bf16 at the end). Shapes: heads 2, 20, 32, 64 (padded 16-head tiles), batch 1–64, −1 ids,
//   lengths 1..640 and HCA lists up to 8192, explicit pools and GpuModel's decode mode (ring
//   window and HCA lists from positions, per-row buffers, fp32 q/out, graph split_rows); the
//   in-cluster merge at cluster sizes 2..16 with empty splits, head groups 1/2/4 (uneven too;
//   bit-equal to one group: another kernel instantiation and warp mapping), and the
//   merge-kernel path. Every case also runs the other kernel (warp-specialized ↔ mma.sync, one
//   head group; plan.warp_specialized toggled) against the same tolerance; cases ws_* are the
//   warp-specialized kernel's own edges (−1 padding, short lists, H=32 / 20, HCA 8192, one split).
//   The KV dequantization is checked bit for bit. The indexer top-k: sm90_indexer_topk_test.cu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu/attention.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "gpu/sparse_decode.h"
#include "numerics/formats.h"
#include "numerics/quant.h"

namespace dsv4::gpu::sm90 {
namespace {

using numerics::round_bf16;

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
  SKIP_WITHOUT_GPU();
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

// Checks out [rows, heads, 512] (host floats) against cpu::sparse_attention_head and an fp64
// softmax with unrounded probabilities over each row's candidate list (nullptr: invalid id);
// returns the number of outputs out of tolerance (file comment) and prints the error summary.
int64_t check_attention(const char* name, int rows, int heads, const std::vector<float>& q,
                        const std::vector<float>& sink,
                        const std::vector<std::vector<const float*>>& cands, float scale,
                        const std::vector<float>& out, const char* plan_info) {
  double max_err_ref = 0, max_err_f64 = 0, max_abs_ref = 0;
  int64_t bad = 0, equal_bits = 0;
  std::vector<float> ref(kHeadDim);
  std::vector<double> f64(kHeadDim), f64abs(kHeadDim);
  for (int r = 0; r < rows; ++r) {
    const std::vector<const float*>& cand = cands[r];
    for (int h = 0; h < heads; ++h) {
      const float* qh = &q[(size_t(r) * heads + h) * kHeadDim];
      cpu::sparse_attention_head(std::span(qh, kHeadDim), cand, sink[h], scale, ref);
      std::vector<double> sc(cand.size());
      double m = -INFINITY;
      for (size_t j = 0; j < cand.size(); ++j) {
        if (!cand[j]) continue;
        double dot = 0;
        for (int k = 0; k < kHeadDim; ++k) dot += double(qh[k]) * cand[j][k];
        sc[j] = dot * scale;
        m = std::max(m, sc[j]);
      }
      std::fill(f64.begin(), f64.end(), 0.0);
      std::fill(f64abs.begin(), f64abs.end(), 0.0);
      double l = 0;
      for (size_t j = 0; j < cand.size(); ++j) {
        if (!cand[j]) continue;
        const double p = std::exp(sc[j] - m);
        l += p;
        for (int k = 0; k < kHeadDim; ++k) {
          f64[k] += p * cand[j][k];
          f64abs[k] += p * std::fabs(cand[j][k]);
        }
      }
      const double denom = m == -INFINITY ? INFINITY : l + std::exp(double(sink[h]) - m);
      for (int k = 0; k < kHeadDim; ++k) {
        const float g = out[(size_t(r) * heads + h) * kHeadDim + k];
        const double exact = f64[k] / denom;
        const double e1 = std::fabs(g - ref[k]), e2 = std::fabs(g - exact);
        max_err_ref = std::max(max_err_ref, e1);
        max_err_f64 = std::max(max_err_f64, e2);
        max_abs_ref = std::max(max_abs_ref, double(std::fabs(ref[k])));
        equal_bits += g == ref[k];
        const double tol = 1e-3 + 1e-2 * (std::fabs(exact) + f64abs[k] / denom);
        bad += e1 > tol || e2 > tol || !(g == round_bf16(g));
      }
    }
  }
  const double n = double(rows) * heads * kHeadDim;
  std::printf("[%s] rows %d heads %d %s: max|gpu-cpu| %.3g, max|gpu-fp64| %.3g (max|ref| %.3g), "
              "bit-equal to cpu %.2f%%, out of tolerance %lld\n",
              name, rows, heads, plan_info, max_err_ref, max_err_f64, max_abs_ref,
              100.0 * equal_bits / n, (long long)bad);
  return bad;
}

std::string plan_info(const SparseDecodePlan& p) {
  return "chunk " + std::to_string(p.chunk) + " splits " + std::to_string(p.splits) + " cluster " +
         std::to_string(p.cluster) + " groups " + std::to_string(p.head_groups) +
         (p.warp_specialized ? " ws" : " mma.sync");
}

// The split plan with an explicit max_cluster is a pure host function (no device): the shapes
// GpuModel's decode sees on an H200 (cluster capacity 7 / 15 / 30 / 66 for 16 / 8 / 4 / 2).
TEST(Sm90SparseDecodePlan, ClusterSplitsAndHeadGroups) {
  struct Want {
    int rows, max_main, max_extra, min_chunk, heads, max_cluster, head_groups;
    int splits, cluster, groups, group_tiles, chunk;
    bool workspace;
  };
  const Want cases[] = {
      {1, 128, 512, 16, 64, 16, 0, 16, 16, 4, 1, 40, false},    // B=1 CSA: 64 CTAs of 40 (8-aligned)
      {1, 128, 512, 16, 32, 16, 0, 16, 16, 2, 1, 40, false},    // TP2 half the heads
      {1, 128, 0, 16, 64, 8, 0, 8, 8, 4, 1, 16, false},         // SWA
      {8, 128, 512, 16, 64, 8, 0, 8, 8, 2, 2, 80, false},       // 8 × 8 × 2 = 128 CTAs
      {64, 128, 512, 16, 64, 2, 0, 2, 2, 1, 4, 320, false},     // 2·2 ≥ 3 splits: cluster 2
      {1, 128, 8192, 16, 64, 16, 0, 132, 1, 1, 4, 64, true},    // long list: merge kernel
      {8, 128, 8192, 16, 64, 8, 0, 17, 1, 1, 4, 512, true},     // 64-candidate tiles
      {8, 128, 512, 16, 64, 1, 4, 17, 1, 1, 4, 48, true},       // never cluster; groups ignored
      {2, 128, 512, 640, 20, 16, 4, 1, 1, 2, 1, 640, false},    // one split, 2 tiles → 2 groups
      {4, 128, 512, 16, 40, 4, 2, 33, 1, 1, 3, 32, true},       // merge kernel: one group
  };
  for (const Want& w : cases) {
    const SparseDecodePlan p = plan_sparse_decode(w.rows, w.max_main, w.max_extra, 132, w.min_chunk, w.heads,
                                                  0, w.max_cluster, w.head_groups);
    SCOPED_TRACE(std::to_string(w.rows) + " rows, " + std::to_string(w.max_main + w.max_extra) + " cands, " +
                 std::to_string(w.heads) + " heads, max_cluster " + std::to_string(w.max_cluster));
    EXPECT_EQ(p.splits, w.splits);
    EXPECT_EQ(p.cluster, w.cluster);
    EXPECT_EQ(p.head_groups, w.groups);
    EXPECT_EQ(p.group_tiles, w.group_tiles);
    EXPECT_EQ(p.chunk, w.chunk);
    EXPECT_EQ(p.workspace_bytes > 0, w.workspace);
    EXPECT_LE(p.workspace_bytes, sparse_decode_workspace_bound(w.rows, w.heads, 132));
    EXPECT_EQ(p.warp_specialized, w.rows >= kWsMinRows);
  }
  // Graph padding: the kernel follows split_rows, so eager and graph rows agree.
  EXPECT_TRUE(plan_sparse_decode(4, 128, 512, 132, 16, kHeads, 32, 2).warp_specialized);
  EXPECT_EQ(plan_sparse_decode(4, 128, 512, 132, 16, kHeads, 32, 2).head_groups, 1);
}

struct AttnCase {
  const char* name;
  int rows, max_main, max_extra;
  bool random_lengths;  // else every row has max_main + max_extra
  double neg_frac;      // fraction of −1 ids
  int min_chunk;
  int heads = kHeads;
  int max_cluster = 0;  // plan_sparse_decode's: 0 device limit, 1 merge kernel only
  int head_groups = 0;  // plan_sparse_decode's: 0 auto
};

class Sm90SparseDecode : public ::testing::TestWithParam<AttnCase> {};

TEST_P(Sm90SparseDecode, MatchesCpuReferenceAndFp64) {
  SKIP_WITHOUT_GPU();
  const AttnCase c = GetParam();
  const int H = c.heads;
  std::mt19937 rng(1234 + c.rows * 7 + c.max_extra + H);
  const int64_t n_main = std::max(1, c.max_main) * 2, n_extra = std::max(1, c.max_extra) + 64;
  const std::vector<float> kv_main = random_kv(n_main, rng, true);
  const std::vector<float> kv_extra = random_kv(n_extra, rng, true);
  std::vector<int32_t> slot_main, slot_extra;
  PoolOnDevice pm = make_pool(kv_main, 64, rng, slot_main);
  PoolOnDevice pe = make_pool(kv_extra, 24, rng, slot_extra);  // (a page size not a power of two)

  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<float> q(size_t(c.rows) * H * kHeadDim);
  for (float& v : q) v = round_bf16(2.5f * nd(rng));
  std::vector<float> sink(H);
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
  DeviceBuffer<uint16_t> d_out(size_t(c.rows) * H * kHeadDim);
  SparseDecodeArgs a;
  a.q = reinterpret_cast<const __nv_bfloat16*>(d_q.get());
  a.heads = H;
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
  const SparseDecodePlan plan =
      plan_sparse_decode(c.rows, c.max_main, c.max_extra, 132, c.min_chunk, H, 0, c.max_cluster, c.head_groups);
  DeviceBuffer<uint8_t> ws(std::max<size_t>(plan.workspace_bytes, 1));
  sparse_decode(a, plan, ws.get(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> out_bits = d_out.download();
  std::vector<float> out(out_bits.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = numerics::bf16_bits_to_float(out_bits[i]);
  if (plan.head_groups > 1) {  // head groups only move a head's arithmetic: the same bits in one CTA
    const SparseDecodePlan one =
        plan_sparse_decode(c.rows, c.max_main, c.max_extra, 132, c.min_chunk, H, 0, c.max_cluster, 1);
    ASSERT_EQ(one.head_groups, 1);
    d_out.fill_bytes(0);
    sparse_decode(a, one, ws.get(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_TRUE(d_out.download() == out_bits) << c.name << ": groups " << plan.head_groups << " vs 1";
  }

  std::vector<std::vector<const float*>> cands(c.rows);
  for (int r = 0; r < c.rows; ++r) {
    for (int j = 0; j < main_len[r]; ++j) {
      const int32_t e = main_e[r * a.main_stride + j];
      cands[r].push_back(e < 0 ? nullptr : &kv_main[e * kHeadDim]);
    }
    for (int j = 0; j < extra_len[r]; ++j) {
      const int32_t e = extra_e[r * std::max(1, c.max_extra) + j];
      cands[r].push_back(e < 0 ? nullptr : &kv_extra[e * kHeadDim]);
    }
  }
  EXPECT_EQ(check_attention(c.name, c.rows, H, q, sink, cands, a.scale, out, plan_info(plan).c_str()), 0);
  // The other kernel (warp-specialized ↔ mma.sync, one head group) on the same inputs.
  SparseDecodePlan other =
      plan_sparse_decode(c.rows, c.max_main, c.max_extra, 132, c.min_chunk, H, 0, c.max_cluster, 1);
  if (other.cluster <= 8) {
    other.warp_specialized = !plan.warp_specialized;
    d_out.fill_bytes(0);
    sparse_decode(a, other, ws.get(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> bits = d_out.download();
    std::vector<float> out2(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out2[i] = numerics::bf16_bits_to_float(bits[i]);
    EXPECT_EQ(check_attention(c.name, c.rows, H, q, sink, cands, a.scale, out2, plan_info(other).c_str()), 0);
  }
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
                      AttnCase{"hca_8192_b16", 16, 128, 8192, true, 0.0, 16},
                      AttnCase{"h2_csa_b3", 3, 128, 512, true, 0.05, 16, 2},
                      AttnCase{"h2_one_split", 2, 128, 4, true, 0.0, 256, 2},
                      AttnCase{"h32_csa_b1", 1, 128, 512, false, 0.0, 16, 32},
                      AttnCase{"h32_csa_b64_pad", 64, 128, 512, true, 0.05, 16, 32},
                      AttnCase{"h32_hca_8192_b4", 4, 128, 8192, true, 0.01, 16, 32},
                      AttnCase{"h20_window_only", 7, 128, 0, true, 0.1, 16, 20},
                      // In-cluster merge at every cluster size, empty splits (short rows, −1
                      // ids), and the merge-kernel path with many splits (max_cluster 1).
                      AttnCase{"csa_b1_cluster8", 1, 128, 512, false, 0.0, 16, kHeads, 8},
                      AttnCase{"csa_b1_cluster2", 1, 128, 512, false, 0.0, 16, kHeads, 2},
                      AttnCase{"h32_csa_b1_cluster16", 1, 128, 512, true, 0.1, 16, 32, 16},
                      AttnCase{"mixed_len_cluster16", 6, 128, 512, true, 0.3, 16, kHeads, 16},
                      AttnCase{"short_rows_cluster16", 3, 256, 0, true, 0.0, 16, kHeads, 16},
                      AttnCase{"csa_b1_merge_kernel", 1, 128, 512, false, 0.0, 16, kHeads, 1},
                      AttnCase{"mixed_len_merge_kernel", 5, 128, 512, true, 0.1, 16, 32, 1},
                      AttnCase{"hca_2048_b1_cluster16", 1, 128, 1920, true, 0.0, 16, kHeads, 16},
                      AttnCase{"cands384_b5_cluster4", 5, 128, 256, true, 0.1, 16, kHeads, 4, 1},
                      // Head groups: explicit 1 (one CTA for all heads), 2 and 4 (uneven:
                      // 20 heads = 2 tiles, 40 heads = 3 tiles), with one split and clusters.
                      AttnCase{"csa_b1_cluster16_groups1", 1, 128, 512, false, 0.0, 16, kHeads, 16, 1},
                      AttnCase{"csa_b1_cluster16_groups4", 1, 128, 512, true, 0.1, 16, kHeads, 16, 4},
                      AttnCase{"csa_b3_cluster8_groups2", 3, 128, 512, true, 0.1, 16, kHeads, 8, 2},
                      AttnCase{"h40_cluster4_groups2", 4, 128, 512, true, 0.1, 16, 40, 4, 2},
                      AttnCase{"h20_window_groups4", 5, 128, 0, true, 0.1, 16, 20, 0, 4},
                      AttnCase{"h64_one_split_groups4", 2, 128, 512, true, 0.1, 640, kHeads, 0, 4},
                      AttnCase{"merge_kernel_groups_ignored", 2, 128, 512, true, 0.1, 16, kHeads, 1, 4},
                      // Warp-specialized kernel (rows ≥ kWsMinRows): −1 padding and short lists,
                      // H=32 / 20, HCA lists of 8192 (merge kernel, 15 tiles per CTA), one split.
                      AttnCase{"ws_b16_pad30", 16, 128, 512, true, 0.3, 16},
                      AttnCase{"ws_b32_short", 32, 40, 0, true, 0.1, 16},
                      AttnCase{"ws_h32_b64_full", 64, 128, 512, false, 0.0, 16, 32},
                      AttnCase{"ws_h32_hca_8192_b16", 16, 128, 8192, true, 0.02, 16, 32},
                      AttnCase{"ws_h20_b17_cluster4", 17, 128, 512, true, 0.1, 16, 20, 4},
                      AttnCase{"ws_one_split_b16", 16, 128, 512, true, 0.05, 640}),
    [](const auto& info) { return std::string(info.param.name); });

// GpuModel's decode mode: per-row cache buffers (window ring of `win` entries, compressed
// entries), lists implied by each row's position (ring window, HCA) or a CSA top-k with −1
// padding, fp32 q / out, split count planned for split_rows ≥ rows (graph padding).
struct DecodeModeCase {
  const char* name;
  int heads, win, ratio;  // ratio 0: window only; 4: CSA (top-k lists); 128: HCA
  int topk;
  std::vector<int> pos;
  int split_rows = 0;
  int origin = -1;  // ≥ 0: prefill's linear window pool of positions origin..max_pos (window_origin)
};

class Sm90SparseDecodeMode : public ::testing::TestWithParam<DecodeModeCase> {};

TEST_P(Sm90SparseDecodeMode, RingAndCompressedListsMatchCpuReference) {
  SKIP_WITHOUT_GPU();
  const DecodeModeCase c = GetParam();
  const int rows = int(c.pos.size()), H = c.heads;
  const bool csa = c.ratio == 4;
  std::mt19937 rng(555 + rows + H + c.ratio);
  const int max_pos = *std::max_element(c.pos.begin(), c.pos.end());
  const int entries = c.ratio > 0 ? std::max(1, (max_pos + 1) / c.ratio) : 1;
  std::vector<std::vector<float>> ring(rows), comp(rows);
  std::vector<DeviceBuffer<uint8_t>> d_ring(rows), d_comp(rows);
  std::vector<DecodeLayerCache> table(rows);
  for (int r = 0; r < rows; ++r) {
    ring[r] = random_kv(c.origin >= 0 ? max_pos + 1 - c.origin : c.win, rng, true);
    comp[r] = random_kv(entries, rng, true);
    for (auto [v, b] : {std::pair{&ring[r], &d_ring[r]}, std::pair{&comp[r], &d_comp[r]}}) {
      const int64_t n = int64_t(v->size()) / kHeadDim;
      b->resize(size_t(kv_cache_bytes(n)));
      b->fill_bytes(0xAB);
      std::vector<int32_t> slots(n);
      std::iota(slots.begin(), slots.end(), 0);
      DeviceBuffer<float> d_kv;
      d_kv.upload(*v);
      DeviceBuffer<int32_t> d_slots;
      d_slots.upload(slots);
      kv_cache_insert(d_kv.get(), d_slots.get(), n, kv_cache_pool(b->get()), nullptr);
    }
    table[r].window = d_ring[r].get();
    table[r].comp.cache = d_comp[r].get();
  }
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<float> q(size_t(rows) * H * kHeadDim), sink(H);
  for (float& v : q) v = round_bf16(2.5f * nd(rng));
  for (float& v : sink) v = 4.0f * ud(rng) - 2.0f;
  std::vector<int32_t> sel(size_t(rows) * std::max(1, c.topk), -1), cnt(rows, 0);
  std::vector<std::vector<const float*>> cands(rows);
  for (int r = 0; r < rows; ++r) {
    const int p = c.pos[r];
    for (int src = std::max(0, p - c.win + 1); src <= p; ++src)
      cands[r].push_back(&ring[r][size_t(c.origin >= 0 ? src - c.origin : src % c.win) * kHeadDim]);
    const int visible = c.ratio > 0 ? (p + 1) / c.ratio : 0;
    if (csa) {  // a random subset in random order, −1 ids mixed in
      std::vector<int32_t> ids(visible);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      cnt[r] = std::min(c.topk, visible);
      for (int i = 0; i < cnt[r]; ++i) {
        const int32_t id = ud(rng) < 0.05 ? -1 : ids[i];
        sel[size_t(r) * c.topk + i] = id;
        cands[r].push_back(id < 0 ? nullptr : &comp[r][size_t(id) * kHeadDim]);
      }
    } else {
      for (int e = 0; e < visible; ++e) cands[r].push_back(&comp[r][size_t(e) * kHeadDim]);
    }
  }
  DeviceBuffer<float> d_q, d_sink, d_out(size_t(rows) * H * kHeadDim);
  d_q.upload(q);
  d_sink.upload(sink);
  DeviceBuffer<int32_t> d_pos, d_sel, d_cnt;
  d_pos.upload(std::vector<int32_t>(c.pos.begin(), c.pos.end()));
  d_sel.upload(sel);
  d_cnt.upload(cnt);
  DeviceBuffer<DecodeLayerCache> d_table;
  d_table.upload(table);
  SparseDecodeArgs a;
  a.q_f32 = d_q.get();
  a.heads = H;
  a.main_pool = kv_cache_pool(nullptr);
  a.extra_pool = kv_cache_pool(nullptr);
  a.pos = d_pos.get();
  a.win = c.win;
  a.window_origin = c.origin;
  a.caches = d_table.get();
  if (csa) {
    a.extra_idx = d_sel.get();
    a.extra_len = d_cnt.get();
    a.extra_stride = c.topk;
  } else {
    a.extra_ratio = c.ratio;
  }
  a.sink = d_sink.get();
  a.out_f32 = d_out.get();
  a.rows = rows;
  const int max_extra = csa ? c.topk : c.ratio > 0 ? entries : 0;
  const SparseDecodePlan plan = plan_sparse_decode(rows, c.win, max_extra, 132, 16, H, c.split_rows);
  DeviceBuffer<uint8_t> ws(std::max<size_t>(sparse_decode_workspace_bound(std::max(rows, c.split_rows), H, 132), 1));
  ASSERT_LE(plan.workspace_bytes, ws.size());
  sparse_decode(a, plan, ws.get(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(check_attention(c.name, rows, H, q, sink, cands, a.scale, d_out.download(), plan_info(plan).c_str()), 0);
  // The other kernel (warp-specialized ↔ mma.sync, one head group).
  SparseDecodePlan other = plan_sparse_decode(rows, c.win, max_extra, 132, 16, H, c.split_rows, 0, 1);
  if (other.cluster <= 8) {
    other.warp_specialized = !plan.warp_specialized;
    d_out.fill_bytes(0);
    sparse_decode(a, other, ws.get(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(check_attention(c.name, rows, H, q, sink, cands, a.scale, d_out.download(), plan_info(other).c_str()),
              0);
  }
}

std::vector<int> positions(int n, int max_pos, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> p(n);
  for (int& v : p) v = int(rng() % uint32_t(max_pos + 1));
  p[0] = 0;
  if (n > 1) p[n - 1] = max_pos;
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Sm90SparseDecodeMode,
    ::testing::Values(DecodeModeCase{"window_h2", 2, 128, 0, 0, {0, 1, 5, 126, 127, 128, 300, 511}},
                      DecodeModeCase{"window_w16_h2", 2, 16, 0, 0, {0, 3, 15, 16, 17, 200}},
                      DecodeModeCase{"csa_h2_top4", 2, 128, 4, 4, {0, 3, 4, 7, 130, 511}, 8},
                      DecodeModeCase{"csa_h2_top512", 2, 128, 4, 512, {3, 100, 2047, 2500}},
                      DecodeModeCase{"csa_h32_b1", 32, 128, 4, 512, {8191}},
                      DecodeModeCase{"csa_h64_b1", 64, 128, 4, 512, {8191}},
                      DecodeModeCase{"csa_h64_b64", 64, 128, 4, 512, positions(64, 2000, 1)},
                      DecodeModeCase{"hca_h2", 2, 128, 128, 0, {0, 126, 127, 255, 256, 511}, 8},
                      DecodeModeCase{"hca_h32_8192", 32, 128, 128, 0, {1048575}},
                      DecodeModeCase{"hca_h64_b16", 64, 128, 128, 0, positions(16, 65535, 2), 24},
                      // Prefill: consecutive rows over one linear window pool (from 0, and a
                      // later chunk whose pool starts win − 1 before its first row).
                      DecodeModeCase{"prefill_window_w16_h2", 2, 16, 0, 0, {0, 1, 2, 3, 15, 16, 17, 40}, 0, 0},
                      DecodeModeCase{"prefill_csa_h32", 32, 128, 4, 512, {427, 428, 429, 500, 700, 1023}, 0, 300},
                      DecodeModeCase{"prefill_hca_h64", 64, 128, 128, 0, {600, 601, 700, 767}, 0, 473}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dsv4::gpu::sm90
