#include "bench/report.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace dsv4::bench {
namespace {

using nlohmann::json;

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string line(const std::string& label, const std::string& value) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-40s %12s\n", label.c_str(), value.c_str());
  return buf;
}

std::string section(const std::string& title) {
  const int width = 53;
  const int pad = std::max(0, width - static_cast<int>(title.size()) - 2);
  return std::string(pad / 2, '-') + " " + title + " " + std::string(pad - pad / 2, '-') + "\n";
}

std::string latency_lines(const std::string& name, const Summary& s) {
  return section(name) + line("Mean " + name + " (ms):", fmt("%.2f", s.mean)) +
         line("Median " + name + " (ms):", fmt("%.2f", s.median)) +
         line("P90 " + name + " (ms):", fmt("%.2f", s.p90)) +
         line("P99 " + name + " (ms):", fmt("%.2f", s.p99));
}

json summary_json(const Summary& s) {
  return {{"mean", s.mean}, {"median", s.median}, {"p90", s.p90}, {"p99", s.p99},
          {"std", s.std},   {"max", s.max},       {"count", s.count}};
}

}  // namespace

std::string concurrency_label(int max_concurrency) {
  return max_concurrency > 0 ? std::to_string(max_concurrency) : "unlimited";
}

std::string format_result_block(const BenchConfig& cfg, const SweepPoint& p) {
  const BenchMetrics& m = p.metrics;
  std::string out = "\n============ Serving Benchmark Result ============\n";
  out += line("Backend:", backend_name(cfg.client.backend));
  out += line("Traffic request rate:",
              std::isfinite(cfg.request_rate) ? fmt("%.2f", cfg.request_rate) : "inf");
  out += line("Max request concurrency:", concurrency_label(p.max_concurrency));
  out += line("Successful requests:", std::to_string(m.completed));
  out += line("Failed requests:", std::to_string(m.failed));
  out += line("Benchmark duration (s):", fmt("%.2f", m.duration_s));
  out += line("Total input tokens:", std::to_string(m.total_input_tokens));
  out += line("Total generated tokens:", std::to_string(m.total_output_tokens));
  out += line("Request throughput (req/s):", fmt("%.2f", m.request_throughput));
  out += line("Input token throughput (tok/s):", fmt("%.2f", m.input_throughput));
  out += line("Output token throughput (tok/s):", fmt("%.2f", m.output_throughput));
  out += line("Total token throughput (tok/s):", fmt("%.2f", m.total_throughput));
  out += line("Concurrency:", fmt("%.2f", m.concurrency));
  out += latency_lines("E2E Latency", m.e2e_ms);
  out += latency_lines("TTFT", m.ttft_ms);
  out += latency_lines("TPOT", m.tpot_ms);
  out += latency_lines("ITL", m.itl_ms);
  for (const auto& e : m.errors) out += "error: " + e + "\n";
  out += "==================================================\n";
  return out;
}

std::string format_sweep_table(const std::vector<SweepPoint>& points) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%11s %5s %5s %9s %10s %10s %10s %10s %10s %10s %10s\n",
                "concurrency", "ok", "fail", "req/s", "out tok/s", "tot tok/s", "TTFT p50",
                "TPOT p50", "ITL p50", "E2E p50", "E2E p99");
  out += buf;
  for (const auto& p : points) {
    const BenchMetrics& m = p.metrics;
    std::snprintf(buf, sizeof(buf),
                  "%11s %5d %5d %9.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n",
                  concurrency_label(p.max_concurrency).c_str(), m.completed, m.failed,
                  m.request_throughput, m.output_throughput, m.total_throughput, m.ttft_ms.median,
                  m.tpot_ms.median, m.itl_ms.median, m.e2e_ms.median, m.e2e_ms.p99);
    out += buf;
  }
  out += "(latencies in ms)\n";
  return out;
}

std::string result_json(const BenchConfig& cfg, const std::string& model,
                        const std::vector<SweepPoint>& points, bool details) {
  json config = {
      {"base_url", cfg.client.base_url},
      {"backend", backend_name(cfg.client.backend)},
      {"model", model},
      {"dataset_name", cfg.dataset_name},
      {"dataset_path", cfg.dataset_path},
      {"random_input_len", cfg.random_input_len},
      {"random_output_len", cfg.random_output_len},
      {"random_range_ratio", cfg.random_range_ratio},
      {"num_prompts", cfg.num_prompts},
      {"max_concurrency", cfg.max_concurrency},
      {"request_rate", std::isfinite(cfg.request_rate) ? json(cfg.request_rate) : json("inf")},
      {"warmup_requests", cfg.warmup_requests},
      {"ignore_eos", cfg.client.ignore_eos},
      {"seed", cfg.seed},
  };
  json results = json::array();
  for (const auto& p : points) {
    const BenchMetrics& m = p.metrics;
    json r = {
        {"max_concurrency", p.max_concurrency > 0 ? json(p.max_concurrency) : json("unlimited")},
        {"completed", m.completed},
        {"failed", m.failed},
        {"duration_s", m.duration_s},
        {"total_input_tokens", m.total_input_tokens},
        {"total_output_tokens", m.total_output_tokens},
        {"request_throughput", m.request_throughput},
        {"input_throughput", m.input_throughput},
        {"output_throughput", m.output_throughput},
        {"total_throughput", m.total_throughput},
        {"concurrency", m.concurrency},
        {"ttft_ms", summary_json(m.ttft_ms)},
        {"tpot_ms", summary_json(m.tpot_ms)},
        {"itl_ms", summary_json(m.itl_ms)},
        {"e2e_ms", summary_json(m.e2e_ms)},
        {"errors", m.errors},
    };
    if (details) {
      json ttfts = json::array(), e2es = json::array(), itls = json::array(),
           in_lens = json::array(), out_lens = json::array(), errors = json::array();
      for (const auto& q : p.results) {
        ttfts.push_back(q.success ? q.ttft_s * 1e3 : 0.0);
        e2es.push_back(q.success ? q.e2e_s * 1e3 : 0.0);
        json gaps = json::array();
        for (double g : q.itls_s) gaps.push_back(g * 1e3);
        itls.push_back(gaps);
        in_lens.push_back(q.prompt_tokens);
        out_lens.push_back(q.output_tokens);
        errors.push_back(q.error);
      }
      r["ttfts_ms"] = ttfts;
      r["e2e_latencies_ms"] = e2es;
      r["itls_ms"] = itls;
      r["input_lens"] = in_lens;
      r["output_lens"] = out_lens;
      r["request_errors"] = errors;
    }
    results.push_back(r);
  }
  return json{{"config", config}, {"results", results}}.dump(2) + "\n";
}

}  // namespace dsv4::bench
