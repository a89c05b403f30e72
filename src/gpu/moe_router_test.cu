// moe_router (moe_router.cu) against the CPU reference's routing (cpu::route_token: fp32 gate with
// a double sum, sqrt(softplus), stable top-k, normalized weights) on fresh random inputs, and its
// batch invariance. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "cpu/moe.h"
#include "cpu/weights.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "gpu/ops.h"

namespace dsv4::gpu {
namespace {

struct RouterCase {
  int64_t rows, dim;
  int experts, top_k;
  bool bf16_gate, hash;
};

struct RouterOut {
  std::vector<int32_t> ids, sel;
  std::vector<float> weights;
};

RouterOut run_router(const std::vector<float>& x, int64_t rows, int64_t dim, const DeviceBuffer<uint8_t>& gate,
                     bool bf16, const std::vector<float>& bias, const std::vector<int32_t>& tid2eid,
                     const std::vector<int32_t>& tokens, int E, int k, float scale) {
  auto dx = to_device(x);
  auto db = to_device(bias.empty() ? std::vector<float>{0.0f} : bias);
  auto dt = to_device(tid2eid.empty() ? std::vector<int32_t>{0} : tid2eid);
  auto dtok = to_device(tokens);
  const int64_t need = moe_router_workspace(rows, dim, E);
  DeviceBuffer<double> parts(static_cast<size_t>(need));
  DeviceBuffer<int32_t> ids(static_cast<size_t>(rows * k)), sel(static_cast<size_t>(rows * k));
  DeviceBuffer<float> w(static_cast<size_t>(rows * k));
  moe_router(dx.get(), rows, dim, gate.get(), bf16, bias.empty() ? nullptr : db.get(),
             tid2eid.empty() ? nullptr : dt.get(), dtok.get(), E, k, 1.5f * scale, parts.get(), need, ids.get(),
             w.get(), sel.get(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return {ids.download(), sel.download(), w.download()};
}

class MoeRouterTest : public ::testing::TestWithParam<RouterCase> {};

// Same experts as the CPU for every row (selection order and ascending order), weights within
// 4 fp32 ulp and at least half bit-equal: the logits agree, but the GPU's softplus (log1p in
// double, rounded once) and the C library's log1pf may differ in the last place, and s / Σ s and
// × route_scale round again (over the 13,200 weights of the 2200-row case, a dozen differ by 2–4
// ulp) — on hash layers, whose experts are not the top scores, measured 44 of 54 equal. Every
// row the same bits alone as in the batch.
TEST_P(MoeRouterTest, MatchesCpuRoutingAndIsBatchInvariant) {
  SKIP_WITHOUT_GPU();
  const RouterCase p = GetParam();
  const int64_t n = p.rows, D = p.dim;
  const int E = p.experts, k = p.top_k;
  std::mt19937_64 rng(1000 + n * 7 + E + p.hash);
  // Gate rows scaled so that the logits spread over softplus's curved part and its linear tail.
  std::vector<float> gate = random_bf16(static_cast<size_t>(E) * D, 0.5f / std::sqrt(float(D)), 31 + E);
  if (!p.bf16_gate) {
    std::normal_distribution<float> d(0.0f, 0.5f / std::sqrt(float(D)));
    for (float& g : gate) g = d(rng);
  }
  const std::vector<float> x = random_bf16(static_cast<size_t>(n) * D, 1.0f, 77 + n);
  std::vector<float> bias;
  std::vector<int32_t> tid2eid, tokens(static_cast<size_t>(n));
  const int vocab = 50;
  std::uniform_int_distribution<int> tok(0, vocab - 1), ex(0, E - 1);
  for (auto& t : tokens) t = tok(rng);
  if (p.hash) {
    tid2eid.resize(static_cast<size_t>(vocab) * k);
    for (auto& e : tid2eid) e = ex(rng);
  } else {
    std::normal_distribution<float> d(0.0f, 0.05f);
    bias.resize(static_cast<size_t>(E));
    for (float& b : bias) b = d(rng);
  }
  DeviceBuffer<uint8_t> dgate(gate.size() * (p.bf16_gate ? 2 : 4));
  if (p.bf16_gate) {
    const auto bits = to_bf16_bits(gate);
    CUDA_CHECK(cudaMemcpy(dgate.get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  } else {
    CUDA_CHECK(cudaMemcpy(dgate.get(), gate.data(), gate.size() * 4, cudaMemcpyHostToDevice));
  }
  const RouterOut got = run_router(x, n, D, dgate, p.bf16_gate, bias, tid2eid, tokens, E, k, 1.0f);

  cpu::MoeWeights w;
  w.gate = cpu::Fp32Linear{.out = E, .in = D, .weight = gate};
  w.bias = bias;
  w.tid2eid = tid2eid;
  const cpu::MoeParams mp{.top_k = k, .route_scale = 1.5f, .hash = p.hash};
  int64_t exact = 0;
  for (int64_t t = 0; t < n; ++t) {
    const cpu::Routing r = cpu::route_token(std::span(x).subspan(t * D, D), tokens[t], w, mp);
    std::vector<int> order(static_cast<size_t>(k));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return r.experts[a] < r.experts[b]; });
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(got.sel[t * k + j], r.experts[j]) << "row " << t << " selection " << j;
      EXPECT_EQ(got.ids[t * k + j], r.experts[order[j]]) << "row " << t << " slot " << j;
      const float want = r.weights[order[j]], have = got.weights[t * k + j];
      const float ulp = std::ldexp(1.0f, std::ilogb(want) - 23);
      EXPECT_LE(std::fabs(have - want), 4.0f * ulp) << "row " << t << " slot " << j;
      exact += have == want;
    }
  }
  EXPECT_GE(exact, n * k / 2) << exact << " of " << n * k << " weights bit-equal";

  // Batch invariance: rows alone and at another offset give the same bits.
  for (const int64_t t : {int64_t{0}, n / 2, n - 1}) {
    const std::vector<float> xr(x.begin() + t * D, x.begin() + (t + 1) * D);
    const RouterOut one = run_router(xr, 1, D, dgate, p.bf16_gate, bias, tid2eid, {tokens[t]}, E, k, 1.0f);
    EXPECT_EQ(0, std::memcmp(one.ids.data(), got.ids.data() + t * k, k * sizeof(int32_t))) << "row " << t;
    EXPECT_EQ(0, std::memcmp(one.weights.data(), got.weights.data() + t * k, k * sizeof(float))) << "row " << t;
  }
}

// Flash (D 4096, 256 experts, top-6), the golden tiny models (D 128, 8 experts, top-2), a
// partial last chunk (D 1040), E above 256 (32 experts per lane), hash layers, fp32 gates; from
// 128 rows the FP64 tensor-core kernel, split by chunk (200, 130 rows) or whole logits (2200,
// 8500 rows: enough 64-row × 64-expert blocks for a wave); its rows are checked against the
// one-row calls, which take the vector kernel.
INSTANTIATE_TEST_SUITE_P(Shapes, MoeRouterTest,
                         ::testing::Values(RouterCase{1, 4096, 256, 6, true, false},
                                           RouterCase{17, 4096, 256, 6, true, false},
                                           RouterCase{64, 4096, 256, 6, false, false},
                                           RouterCase{9, 4096, 256, 6, true, true},
                                           RouterCase{5, 128, 8, 2, false, false},
                                           RouterCase{3, 128, 8, 2, true, true},
                                           RouterCase{12, 1040, 384, 8, true, false},
                                           RouterCase{300, 512, 64, 4, true, false},
                                           RouterCase{200, 4096, 256, 6, true, false},
                                           RouterCase{130, 4096, 256, 6, false, true},
                                           RouterCase{2200, 4096, 256, 6, true, false},
                                           RouterCase{8500, 512, 64, 4, false, false}));

TEST(MoeRouterTest, RefusesUnsupportedShapesByName) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer<double> parts(1 << 16);
  try {
    moe_router(nullptr, 1, 100, nullptr, true, nullptr, nullptr, nullptr, 8, 2, 1.0f, parts.get(), 1 << 16, nullptr,
               nullptr, nullptr, nullptr);
    FAIL() << "D = 100 accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("hidden size 100"), std::string::npos) << e.what();
  }
  try {
    moe_router(nullptr, 1, 128, nullptr, true, nullptr, nullptr, nullptr, 2048, 2, 1.0f, parts.get(), 1 << 16,
               nullptr, nullptr, nullptr, nullptr);
    FAIL() << "2048 experts accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("2048 experts"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsv4::gpu
