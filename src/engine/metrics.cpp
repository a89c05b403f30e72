#include "engine/metrics.h"

#include <cstdio>

namespace dsv4::engine {

namespace {
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}
void line(std::string& out, const std::string& name, const std::string& type, const std::string& help,
          double value) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + num(value) + "\n";
}
const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                             0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0};
}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::lock_guard lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++total_;
}

uint64_t Histogram::count() const {
  std::lock_guard lock(mu_);
  return total_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  std::lock_guard lock(mu_);
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(total_) + "\n";
}

EngineMetrics::EngineMetrics()
    : ttft(kLatencyBuckets), tpot(kLatencyBuckets), e2e(kLatencyBuckets), queue_time(kLatencyBuckets) {}

void EngineMetrics::set_pool_usage(std::vector<std::pair<std::string, double>> usage) {
  std::lock_guard lock(pool_mu_);
  pool_usage_ = std::move(usage);
}

std::string EngineMetrics::render_prometheus() const {
  std::string out;
  out.reserve(8192);
  out += "# HELP dsv4:requests_total Requests that left the engine, by outcome.\n"
         "# TYPE dsv4:requests_total counter\n";
  out += "dsv4:requests_total{outcome=\"finished\"} " + std::to_string(requests_finished.load()) + "\n";
  out += "dsv4:requests_total{outcome=\"aborted\"} " + std::to_string(requests_aborted.load()) + "\n";
  out += "dsv4:requests_total{outcome=\"rejected\"} " + std::to_string(requests_rejected.load()) + "\n";
  line(out, "dsv4:prompt_tokens_total", "counter", "Prompt tokens prefilled.", static_cast<double>(prompt_tokens));
  line(out, "dsv4:generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(generation_tokens));
  line(out, "dsv4:preemptions_total", "counter", "Recompute preemptions.", static_cast<double>(preemptions));
  line(out, "dsv4:num_running_reqs", "gauge", "Requests admitted to the running batch.",
       static_cast<double>(num_running));
  line(out, "dsv4:num_queue_reqs", "gauge", "Requests waiting for admission.", static_cast<double>(num_queued));
  line(out, "dsv4:num_used_tokens", "gauge", "Tokens held in the KV cache.", static_cast<double>(num_used_tokens));
  line(out, "dsv4:token_usage", "gauge", "Fraction of the fullest cache pool in use.", token_usage.load());
  line(out, "dsv4:gen_throughput", "gauge", "Generation throughput at the last decode log line (token/s).",
       gen_throughput.load());
  line(out, "dsv4:cache_bytes_total", "gauge", "Bytes of all cache arenas.", static_cast<double>(cache_total_bytes));
  line(out, "dsv4:cache_bytes_used", "gauge", "Bytes of cache pages in use.", static_cast<double>(cache_used_bytes));
  {
    std::lock_guard lock(pool_mu_);
    out += "# HELP dsv4:cache_pool_usage Fraction of each cache pool's pages in use.\n"
           "# TYPE dsv4:cache_pool_usage gauge\n";
    for (const auto& [name, f] : pool_usage_) out += "dsv4:cache_pool_usage{pool=\"" + name + "\"} " + num(f) + "\n";
  }
  ttft.render("dsv4:time_to_first_token_seconds", "Time to first token.", out);
  tpot.render("dsv4:time_per_output_token_seconds", "Time per output token after the first.", out);
  e2e.render("dsv4:e2e_request_latency_seconds", "End-to-end request latency.", out);
  queue_time.render("dsv4:request_queue_time_seconds", "Time from arrival to admission.", out);
  return out;
}

}  // namespace dsv4::engine
