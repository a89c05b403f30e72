// P2pAllReduce (p2p_all_reduce.h) on two GPUs: bitwise equal to the fp32 sum in rank order for
// counts from 1 to the maximum (odd tails, misaligned x, all three receive generations, an input
// with the empty-slot bits), inside CUDA
// graphs replayed with new inputs, and as TpGroup::all_reduce_sum's small-message path.
// Skips without two GPUs with peer access (or without NCCL, whose TpGroup supplies the rank
// threads).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/ops.h"
#include "gpu/p2p_all_reduce.h"
#include "gpu/tp_group.h"

namespace dsv4::gpu {
namespace {

constexpr int kRanks = 2;

bool two_peer_gpus() { return has_cuda_device() && tp_supported() && P2pAllReduce::supported(kRanks); }

std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(g);
  if (n > 2) v[1] = -0.0f;  // -0 + -0 = -0 must survive (the sum starts from rank 0's value)
  if (n > 4) {  // the empty-slot pattern as an input: must arrive (as the canonical NaN), not hang
    const uint32_t bits = P2pAllReduce::kEmptyBits;
    std::memcpy(&v[4], &bits, sizeof(float));
  }
  return v;
}

// Expected result: rank 0's value, then + rank 1's, … (what every rank must hold); the
// empty-slot pattern is summed as the canonical quiet NaN.
std::vector<float> rank_order_sum(const std::vector<std::vector<float>>& parts) {
  auto clean = [](float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    if (bits == P2pAllReduce::kEmptyBits) bits = 0x7fffffffu;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  };
  std::vector<float> s = parts[0];
  for (float& v : s) v = clean(v);
  for (size_t r = 1; r < parts.size(); ++r)
    for (size_t i = 0; i < s.size(); ++i) s[i] += clean(parts[r][i]);
  return s;
}

// "" when a and b have the same bits, else where they first differ.
std::string first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return "element " + std::to_string(i) + " of " + std::to_string(got.size()) + ": got " + std::to_string(got[i]) +
             ", want " + std::to_string(want[i]);
  return "";
}

TEST(P2pAllReduce, EagerCallsMatchTheRankOrderSumBitwise) {
  if (!two_peer_gpus()) GTEST_SKIP() << "needs 2 GPUs with peer access and NCCL";
  TpGroup threads(kRanks);
  P2pAllReduce ar(kRanks, 1 << 18);
  // Varying counts (generations rotate, slices move between blocks), one misaligned pointer.
  const std::vector<int64_t> counts = {1, 3, 4, 5, 23, 96, 1000, 4096, 4096 * 8 + 3, 65536, 262143, 1 << 18, 7, 4096};
  for (size_t call = 0; call < 3 * counts.size(); ++call) {  // each count in all three generations
    const size_t c = call % counts.size();
    const int64_t n = counts[c];
    const int64_t offset = c == 5 ? 1 : 0;  // x not 16-byte aligned
    std::vector<std::vector<float>> parts(kRanks), got(kRanks);
    for (int r = 0; r < kRanks; ++r) parts[r] = random_values(n, 1000 * call + r);
    threads.run([&](int r) {
      DeviceBuffer<float> x(static_cast<size_t>(n + offset));
      CUDA_CHECK(cudaMemcpy(x.get() + offset, parts[r].data(), n * sizeof(float), cudaMemcpyHostToDevice));
      ar.run(r, x.get() + offset, n, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      got[r].resize(static_cast<size_t>(n));
      CUDA_CHECK(cudaMemcpy(got[r].data(), x.get() + offset, n * sizeof(float), cudaMemcpyDeviceToHost));
    });
    const auto want = rank_order_sum(parts);
    for (int r = 0; r < kRanks; ++r) ASSERT_EQ(first_difference(got[r], want), "") << "count " << n << " rank " << r;
  }
}

TEST(P2pAllReduce, GraphReplaysWithNewInputs) {
  if (!two_peer_gpus()) GTEST_SKIP() << "needs 2 GPUs with peer access and NCCL";
  TpGroup threads(kRanks);
  P2pAllReduce ar(kRanks, 1 << 16);
  const std::vector<int64_t> counts = {4096, 17, 65536};  // three calls per replay
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  std::vector<DeviceBuffer<float>> x(kRanks);
  std::vector<cudaStream_t> streams(kRanks);
  std::vector<cudaGraphExec_t> execs(kRanks);
  threads.run([&](int r) {
    x[r] = DeviceBuffer<float>(static_cast<size_t>(total));
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
    int64_t at = 0;
    for (int64_t n : counts) {
      ar.run(r, x[r].get() + at, n, streams[r]);
      at += n;
    }
    CUDA_CHECK(cudaStreamEndCapture(streams[r], &graph));
    CUDA_CHECK(cudaGraphInstantiate(&execs[r], graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
  });
  for (int replay = 0; replay < 5; ++replay) {
    std::vector<std::vector<float>> parts(kRanks), got(kRanks);
    for (int r = 0; r < kRanks; ++r) parts[r] = random_values(total, 77 + 10 * replay + r);
    threads.run([&](int r) {
      CUDA_CHECK(cudaMemcpy(x[r].get(), parts[r].data(), total * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaGraphLaunch(execs[r], streams[r]));
      CUDA_CHECK(cudaStreamSynchronize(streams[r]));
      got[r] = x[r].download();
    });
    const auto want = rank_order_sum(parts);  // element-wise, so the call boundaries do not matter
    for (int r = 0; r < kRanks; ++r) ASSERT_EQ(first_difference(got[r], want), "") << "replay " << replay << " rank " << r;
  }
  threads.run([&](int r) {
    CUDA_CHECK(cudaGraphExecDestroy(execs[r]));
    CUDA_CHECK(cudaStreamDestroy(streams[r]));
    x[r] = DeviceBuffer<float>();
  });
}

TEST(P2pAllReduce, TpGroupUsesItForSmallMessagesAndNcclAbove) {
  if (!two_peer_gpus()) GTEST_SKIP() << "needs 2 GPUs with peer access and NCCL";
  {
    TpGroup by_default(kRanks);  // the default: one-shot up to kOneShotMaxFloats, NCCL above
    EXPECT_TRUE(by_default.uses_one_shot(4096));
    EXPECT_TRUE(by_default.uses_one_shot(TpGroup::kOneShotMaxFloats));
    EXPECT_FALSE(by_default.uses_one_shot(TpGroup::kOneShotMaxFloats + 1));
  }
  {
    setenv("DSV4_TP_ALLREDUCE", "nccl", 1);
    TpGroup nccl_only(kRanks);  // DSV4_TP_ALLREDUCE=nccl: NCCL for every size
    unsetenv("DSV4_TP_ALLREDUCE");
    EXPECT_FALSE(nccl_only.uses_one_shot(4096));
  }
  setenv("DSV4_TP_ALLREDUCE", "p2p", 1);
  TpGroup group(kRanks);
  unsetenv("DSV4_TP_ALLREDUCE");
  EXPECT_TRUE(group.uses_one_shot(4096));
  EXPECT_FALSE(group.uses_one_shot(TpGroup::kP2pMaxFloats + 1));
  for (int64_t n : {int64_t{4096}, TpGroup::kP2pMaxFloats + 4}) {  // one-shot, then NCCL: same sums for 2 ranks
    std::vector<std::vector<float>> parts(kRanks), got(kRanks);
    for (int r = 0; r < kRanks; ++r) parts[r] = random_values(n, 5000 + r);
    group.run([&](int r) {
      auto x = to_device(parts[r]);
      group.all_reduce_sum(r, x.get(), n, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      got[r] = x.download();
    });
    const auto want = rank_order_sum(parts);
    for (int r = 0; r < kRanks; ++r) ASSERT_EQ(first_difference(got[r], want), "") << "count " << n << " rank " << r;
  }
}

// The fused hc_post epilogue (TpGroup::all_reduce_sum_hc_post) gives the streams and the sum of
// all_reduce_sum followed by hc_post(round_f = true), bit for bit; shapes it cannot fuse
// (unaligned streams, count not a multiple of dim) are refused, launching nothing.
TEST(P2pAllReduce, FusedHcPostEqualsTheSeparateCalls) {
  if (!two_peer_gpus()) GTEST_SKIP() << "needs 2 GPUs with peer access and NCCL";
  TpGroup group(kRanks);
  for (const int64_t dim : {int64_t{4096}, int64_t{1040}}) {
    for (const int64_t n : {int64_t{1}, int64_t{5}, int64_t{16}}) {
      const int64_t count = n * dim;
      std::vector<std::vector<float>> parts(kRanks);
      for (int r = 0; r < kRanks; ++r) parts[r] = random_values(count, 7000 + 10 * n + r);
      const std::vector<float> streams0 = random_values(n * 4 * dim, 7100 + n);
      std::vector<float> post = random_values(n * 4, 7200 + n), comb = random_values(n * 16, 7300 + n);
      for (float& v : post) v = std::isnan(v) ? 0.5f : v;  // the empty pattern stays out of post / comb
      for (float& v : comb) v = std::isnan(v) ? 0.25f : v;
      std::vector<std::vector<float>> sum_a(kRanks), sum_b(kRanks), st_a(kRanks), st_b(kRanks);
      group.run([&](int r) {
        auto xa = to_device(parts[r]), xb = to_device(parts[r]);
        auto sa = to_device(streams0), sb = to_device(streams0);
        auto dp = to_device(post), dc = to_device(comb);
        group.all_reduce_sum(r, xa.get(), count, nullptr);
        hc_post(xa.get(), dp.get(), dc.get(), n, dim, 4, true, sa.get(), nullptr);
        const P2pAllReduce::HcPost hp{.post = dp.get(), .comb = dc.get(), .streams = sb.get(), .dim = dim};
        ASSERT_TRUE(group.all_reduce_sum_hc_post(r, xb.get(), count, hp, nullptr));
        // Refused shapes: nothing runs, so nothing hangs waiting for the peer.
        const P2pAllReduce::HcPost odd{.post = dp.get(), .comb = dc.get(), .streams = sb.get() + 1, .dim = dim};
        EXPECT_FALSE(group.all_reduce_sum_hc_post(r, xb.get(), count, odd, nullptr));
        EXPECT_FALSE(group.all_reduce_sum_hc_post(r, xb.get(), count - 4, hp, nullptr));
        CUDA_CHECK(cudaDeviceSynchronize());
        sum_a[r] = xa.download(), sum_b[r] = xb.download(), st_a[r] = sa.download(), st_b[r] = sb.download();
      });
      for (int r = 0; r < kRanks; ++r) {
        ASSERT_EQ(first_difference(sum_b[r], sum_a[r]), "") << "sum, n " << n << " dim " << dim << " rank " << r;
        ASSERT_EQ(first_difference(st_b[r], st_a[r]), "") << "streams, n " << n << " dim " << dim << " rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::gpu
