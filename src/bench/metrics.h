// Benchmark metrics with the SGLang / vLLM bench_serving definitions (docs serving.md §3.1).
//
// Pure functions over per-request timestamps, so they are unit-tested exactly:
//   TTFT  = time from sending the request to the first content chunk;
//   ITL   = gap between consecutive content chunks (one sample per gap, pooled over requests);
//   TPOT  = (E2E - TTFT) / (output_tokens - 1) per request with output_tokens > 1, then aggregated;
//   E2E   = time from sending the request to the last byte of the response;
//   throughputs = totals over successful requests / benchmark wall time.
// Percentiles are numpy's default ("linear"): rank = p/100 * (n-1), interpolated between neighbours.
#pragma once

#include <string>
#include <vector>

namespace dsv4::bench {

// What one request produced. All times in seconds. Filled by the client; read by compute_metrics.
struct RequestResult {
  bool success = false;
  std::string error;            // set when !success
  int prompt_tokens = 0;        // server usage.prompt_tokens when reported, else the dataset value
  int output_tokens = 0;        // server usage.completion_tokens when reported, else #content chunks
  double start_s = 0;           // send time, relative to the start of the run
  double ttft_s = 0;            // first content chunk - send time
  double e2e_s = 0;             // end of response - send time
  std::vector<double> itls_s;   // gaps between consecutive content chunks
};

// mean, median (p50), p90, p99 and population std of a sample; all zero for an empty sample.
struct Summary {
  double mean = 0, median = 0, p90 = 0, p99 = 0, std = 0, max = 0;
  int count = 0;
};

// numpy.percentile(values, p) with linear interpolation; p in [0, 100]. Requires non-empty values.
double percentile(std::vector<double> values, double p);

Summary summarize(const std::vector<double>& values);

// TPOT of one request, or a negative value when output_tokens <= 1 (TPOT undefined).
double request_tpot(const RequestResult& r);

// Aggregate metrics of one run (one concurrency value). Latency summaries are in milliseconds.
struct BenchMetrics {
  int completed = 0, failed = 0;
  double duration_s = 0;
  long long total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0;   // completed / duration
  double input_throughput = 0;     // tok/s
  double output_throughput = 0;    // tok/s
  double total_throughput = 0;     // (input + output) tok/s
  double concurrency = 0;          // sum of successful E2E / duration (SGLang's "Concurrency")
  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::vector<std::string> errors;  // first few distinct error messages
};

// duration_s is the wall time of the whole run (first send to last completion).
BenchMetrics compute_metrics(const std::vector<RequestResult>& results, double duration_s);

}  // namespace dsv4::bench
