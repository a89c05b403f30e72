#include "bench/metrics.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace dsv4::bench {

double percentile(std::vector<double> values, double p) {
  DSV4_CHECK(!values.empty(), "percentile of an empty sample");
  DSV4_CHECK(p >= 0 && p <= 100, "percentile ", p, " outside [0, 100]");
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Summary summarize(const std::vector<double>& values) {
  Summary s;
  if (values.empty()) return s;
  s.count = static_cast<int>(values.size());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / s.count;
  double sq = 0;
  for (double v : values) sq += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(sq / s.count);
  s.median = percentile(values, 50);
  s.p90 = percentile(values, 90);
  s.p99 = percentile(values, 99);
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

double request_tpot(const RequestResult& r) {
  if (r.output_tokens <= 1) return -1;
  return (r.e2e_s - r.ttft_s) / (r.output_tokens - 1);
}

BenchMetrics compute_metrics(const std::vector<RequestResult>& results, double duration_s) {
  BenchMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  double e2e_sum = 0;
  for (const auto& r : results) {
    if (!r.success) {
      ++m.failed;
      if (m.errors.size() < 8 &&
          std::find(m.errors.begin(), m.errors.end(), r.error) == m.errors.end()) {
        m.errors.push_back(r.error);
      }
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens;
    m.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    e2e.push_back(r.e2e_s * 1e3);
    e2e_sum += r.e2e_s;
    if (const double t = request_tpot(r); t >= 0) tpot.push_back(t * 1e3);
    for (double g : r.itls_s) itl.push_back(g * 1e3);
  }
  if (duration_s > 0) {
    m.request_throughput = m.completed / duration_s;
    m.input_throughput = static_cast<double>(m.total_input_tokens) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_throughput = m.input_throughput + m.output_throughput;
    m.concurrency = e2e_sum / duration_s;
  }
  m.ttft_ms = summarize(ttft);
  m.tpot_ms = summarize(tpot);
  m.itl_ms = summarize(itl);
  m.e2e_ms = summarize(e2e);
  return m;
}

}  // namespace dsv4::bench
