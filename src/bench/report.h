// Human- and machine-readable output of `dsv4 bench`: the stdout tables, the JSON result file
// and (chart.h) the SVG chart. Pure formatting; no I/O except where a function says so.
#pragma once

#include <string>
#include <vector>

#include "bench/bench_config.h"
#include "bench/metrics.h"

namespace dsv4::bench {

// The measured outcome of one --max-concurrency value.
struct SweepPoint {
  int max_concurrency = 0;              // 0 = unlimited
  BenchMetrics metrics;
  std::vector<RequestResult> results;   // per request, for --output-details
};

// SGLang-style result block for one concurrency value.
std::string format_result_block(const BenchConfig& cfg, const SweepPoint& point);

// One line per concurrency value: the compact sweep summary printed at the end of a run.
std::string format_sweep_table(const std::vector<SweepPoint>& points);

// The JSON result file: {"config": {...}, "results": [one object per concurrency value]}.
// Latencies in ms, throughputs per second; with details each result also carries per-request
// arrays (ttfts_ms, e2e_ms, itls_ms, input_lens, output_lens, errors).
std::string result_json(const BenchConfig& cfg, const std::string& model,
                        const std::vector<SweepPoint>& points, bool details);

// "unlimited" for 0, else the number.
std::string concurrency_label(int max_concurrency);

}  // namespace dsv4::bench
