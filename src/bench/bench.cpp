#include "bench/bench.h"

#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>

#include "base/check.h"
#include "bench/chart.h"
#include "bench/client.h"
#include "bench/dataset.h"

namespace dsv4::bench {
namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  DSV4_CHECK(f.good(), "cannot write '", path, "'");
  f << text;
  f.close();
  DSV4_CHECK(f.good(), "error while writing '", path, "'");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string default_output_file(Backend backend) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  return "dsv4_bench_" + backend_name(backend) + "_" + stamp + ".json";
}

std::string svg_path_for(const std::string& json_path) {
  for (const char* ext : {".jsonl", ".json"}) {
    if (ends_with(json_path, ext)) return json_path.substr(0, json_path.size() - strlen(ext)) + ".svg";
  }
  return json_path + ".svg";
}

BenchOutcome run_bench(const BenchConfig& cfg_in, std::ostream& out) {
  cfg_in.validate();
  BenchConfig cfg = cfg_in;
  if (cfg.client.model.empty() && cfg.client.backend != Backend::kGenerate) {
    cfg.client.model = query_model_name(cfg.client).value_or("default");
  }
  const std::vector<BenchPrompt> prompts =
      cfg.dataset_name == "sharegpt"
          ? load_sharegpt_dataset(cfg.dataset_path, cfg.num_prompts, cfg.sharegpt_output_len,
                                  cfg.seed)
          : make_random_dataset(cfg.num_prompts, cfg.random_input_len, cfg.random_output_len,
                                cfg.random_range_ratio, cfg.vocab_size, cfg.seed);
  std::vector<BenchPrompt> warmup;
  for (int i = 0; i < cfg.warmup_requests; ++i) warmup.push_back(prompts[i % prompts.size()]);

  out << "dsv4 bench: " << backend_name(cfg.client.backend) << " at " << cfg.client.base_url
      << ", model '" << cfg.client.model << "', " << prompts.size() << " " << cfg.dataset_name
      << " prompts\n";
  out.flush();
  BenchOutcome outcome;
  for (size_t k = 0; k < cfg.max_concurrency.size(); ++k) {
    const int conc = cfg.max_concurrency[k];
    if (!warmup.empty()) {
      const RunOutput w = run_requests(cfg.client, warmup, conc, /*request_rate=*/INFINITY,
                                       cfg.seed, /*progress_label=*/"");
      int failed = 0;
      for (const auto& r : w.results) failed += r.success ? 0 : 1;
      if (failed) out << "warning: " << failed << " warm-up request(s) failed: " <<
                      w.results[0].error << "\n";
    }
    const std::string label = "concurrency " + concurrency_label(conc);
    RunOutput run = run_requests(cfg.client, prompts, conc, cfg.request_rate, cfg.seed + k, label);
    SweepPoint point;
    point.max_concurrency = conc;
    point.metrics = compute_metrics(run.results, run.duration_s);
    point.results = std::move(run.results);
    out << format_result_block(cfg, point);
    out.flush();
    outcome.points.push_back(std::move(point));
  }
  out << "\n" << format_sweep_table(outcome.points);

  outcome.json_path =
      cfg.output_file.empty() ? default_output_file(cfg.client.backend) : cfg.output_file;
  outcome.svg_path = svg_path_for(outcome.json_path);
  write_file(outcome.json_path,
             result_json(cfg, cfg.client.model, outcome.points, cfg.output_details));
  write_file(outcome.svg_path,
             render_chart_svg(outcome.points, "dsv4 bench: " + backend_name(cfg.client.backend) +
                                                  " " + cfg.dataset_name + ", " +
                                                  std::to_string(prompts.size()) + " prompts"));
  out << "results: " << outcome.json_path << "\nchart:   " << outcome.svg_path << "\n";
  return outcome;
}

}  // namespace dsv4::bench
