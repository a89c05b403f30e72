// Exact checks of the metric definitions on synthetic timestamps.
#include "bench/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/check.h"

namespace dsv4::bench {
namespace {

TEST(Percentile, MatchesNumpyLinear) {
  // numpy.percentile([1, 2, 3, 4], [0, 50, 90, 99, 100]) = 1, 2.5, 3.7, 3.97, 4
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_NEAR(percentile(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7.0);
  EXPECT_THROW(percentile({}, 50), Error);
  EXPECT_THROW(percentile({1}, 101), Error);
}

TEST(Summarize, MeanMedianStdMax) {
  const Summary s = summarize({10, 20, 30, 40, 50});
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.mean, 30);
  EXPECT_DOUBLE_EQ(s.median, 30);
  EXPECT_NEAR(s.p90, 46, 1e-12);
  EXPECT_NEAR(s.p99, 49.6, 1e-12);
  EXPECT_NEAR(s.std, std::sqrt(200.0), 1e-12);  // population std, like numpy.std
  EXPECT_DOUBLE_EQ(s.max, 50);
  const Summary empty = summarize({});
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(empty.mean, 0);
}

TEST(RequestTpot, Formula) {
  RequestResult r;
  r.ttft_s = 0.1;
  r.e2e_s = 0.5;
  r.output_tokens = 5;
  EXPECT_DOUBLE_EQ(request_tpot(r), (0.5 - 0.1) / 4);
  r.output_tokens = 1;
  EXPECT_LT(request_tpot(r), 0);  // undefined for a single token
}

RequestResult ok(double start, double ttft, double e2e, int in, int out,
                 std::vector<double> itls) {
  RequestResult r;
  r.success = true;
  r.start_s = start;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.prompt_tokens = in;
  r.output_tokens = out;
  r.itls_s = std::move(itls);
  return r;
}

TEST(ComputeMetrics, AggregatesSuccessfulRequestsOnly) {
  std::vector<RequestResult> rs;
  rs.push_back(ok(0.0, 0.100, 0.400, 10, 4, {0.1, 0.1, 0.1}));   // TPOT 100 ms
  rs.push_back(ok(0.0, 0.200, 0.200, 20, 1, {}));                // TPOT undefined
  rs.push_back(ok(0.5, 0.050, 0.650, 30, 7, {0.1, 0.1, 0.1, 0.1, 0.1, 0.1}));  // TPOT 100 ms
  RequestResult bad;
  bad.error = "HTTP 500: boom";
  bad.prompt_tokens = 99;
  rs.push_back(bad);
  rs.push_back(bad);

  const BenchMetrics m = compute_metrics(rs, /*duration_s=*/2.0);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 2);
  ASSERT_EQ(m.errors.size(), 1u);  // distinct messages only
  EXPECT_EQ(m.errors[0], "HTTP 500: boom");
  EXPECT_EQ(m.total_input_tokens, 60);
  EXPECT_EQ(m.total_output_tokens, 12);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.input_throughput, 30);
  EXPECT_DOUBLE_EQ(m.output_throughput, 6);
  EXPECT_DOUBLE_EQ(m.total_throughput, 36);
  EXPECT_DOUBLE_EQ(m.concurrency, (0.4 + 0.2 + 0.65) / 2.0);
  EXPECT_EQ(m.ttft_ms.count, 3);
  EXPECT_NEAR(m.ttft_ms.mean, (100 + 200 + 50) / 3.0, 1e-9);
  EXPECT_NEAR(m.ttft_ms.median, 100, 1e-9);
  EXPECT_EQ(m.tpot_ms.count, 2);
  EXPECT_NEAR(m.tpot_ms.mean, 100, 1e-9);
  EXPECT_EQ(m.itl_ms.count, 9);  // pooled over requests
  EXPECT_NEAR(m.itl_ms.p99, 100, 1e-9);
  EXPECT_NEAR(m.e2e_ms.median, 400, 1e-9);
  EXPECT_NEAR(m.e2e_ms.p90, 400 + 0.8 * 250, 1e-9);
}

TEST(ComputeMetrics, ZeroDurationHasNoThroughput) {
  const BenchMetrics m = compute_metrics({}, 0);
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.output_throughput, 0);
}

}  // namespace
}  // namespace dsv4::bench
