// `dsv4 bench`: serving benchmark client for any OpenAI-compatible or /generate server
// (dsv4, SGLang, vLLM). Flag names follow SGLang's bench_serving; see docs/bench.md.
#include <iostream>
#include <memory>
#include <limits>
#include <string>

#include "apps/dsv4/commands.h"
#include "base/check.h"
#include "bench/bench.h"

namespace {

struct BenchFlags {
  dsv4::bench::BenchConfig cfg;
  std::string base_url, host = "127.0.0.1", backend = "openai-completions";
  int port = 30000;
  std::string max_concurrency, request_rate = "inf";
  bool ignore_eos = false, disable_ignore_eos = false, no_progress = false;
};

const dsv4::app::CommandRegistrar kRegister([](CLI::App& root) {
  auto flags = std::make_shared<BenchFlags>();
  auto& c = flags->cfg;
  auto* cmd = root.add_subcommand("bench", "Benchmark a serving endpoint (TTFT, TPOT, ITL, tok/s)");
  cmd->add_option("--base-url", flags->base_url, "Server URL, e.g. http://127.0.0.1:30000");
  cmd->add_option("--host", flags->host, "Server host when --base-url is not given")
      ->capture_default_str();
  cmd->add_option("--port", flags->port, "Server port when --base-url is not given")
      ->capture_default_str();
  cmd->add_option("--backend", flags->backend,
                  "openai-chat | openai-completions | generate")->capture_default_str();
  cmd->add_option("--model", c.client.model, "Model name sent to OpenAI endpoints "
                  "(default: first id of GET /v1/models)");
  cmd->add_option("--dataset-name", c.dataset_name, "random | sharegpt")->capture_default_str();
  cmd->add_option("--dataset-path", c.dataset_path, "ShareGPT JSON file");
  cmd->add_option("--random-input-len", c.random_input_len, "Input tokens per random prompt")
      ->capture_default_str();
  cmd->add_option("--random-output-len", c.random_output_len, "Output tokens per random prompt")
      ->capture_default_str();
  cmd->add_option("--random-range-ratio", c.random_range_ratio,
                  "Lengths uniform in [ratio*len, len]; 1.0 = fixed")->capture_default_str();
  cmd->add_option("--vocab-size", c.vocab_size, "Random token ids are drawn from [3, vocab-size)")
      ->capture_default_str();
  cmd->add_option("--sharegpt-output-len", c.sharegpt_output_len,
                  "Override the ShareGPT output length (0 = gpt turn words x 1.3)");
  cmd->add_option("--num-prompts", c.num_prompts, "Requests per concurrency value")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", flags->max_concurrency,
                  "Cap on requests in flight; a list such as 1,8,16,32,64 runs a sweep");
  cmd->add_option("--request-rate", flags->request_rate,
                  "Requests per second (Poisson arrivals) or inf")->capture_default_str();
  cmd->add_option("--warmup-requests", c.warmup_requests,
                  "Unmeasured requests before each concurrency value")->capture_default_str();
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "Generate exactly the output length "
                "(default for random)");
  cmd->add_flag("--disable-ignore-eos", flags->disable_ignore_eos, "Let the model stop at EOS");
  cmd->add_option("--seed", c.seed, "Dataset and arrival seed")->capture_default_str();
  cmd->add_option("--output-file", c.output_file,
                  "Result JSON (default ./dsv4_bench_<backend>_<timestamp>.json; chart .svg next "
                  "to it)");
  cmd->add_flag("--output-details", c.output_details, "Per-request arrays in the JSON file");
  cmd->add_option("--request-timeout", c.client.request_timeout_s,
                  "Seconds per HTTP operation")->capture_default_str();
  cmd->add_flag("--disable-progress", flags->no_progress, "No progress bar on stderr");
  cmd->callback([flags] {
    auto cfg = flags->cfg;
    cfg.client.base_url = flags->base_url.empty()
                              ? "http://" + flags->host + ":" + std::to_string(flags->port)
                              : flags->base_url;
    cfg.client.backend = dsv4::bench::parse_backend(flags->backend);
    cfg.max_concurrency = dsv4::bench::parse_concurrency_list(flags->max_concurrency);
    cfg.request_rate = std::numeric_limits<double>::infinity();
    if (flags->request_rate != "inf") {
      try {
        cfg.request_rate = std::stod(flags->request_rate);
      } catch (const std::exception&) {
        DSV4_FAIL("bad --request-rate '", flags->request_rate, "' (a number or inf)");
      }
    }
    cfg.client.ignore_eos = flags->disable_ignore_eos ? false
                            : flags->ignore_eos       ? true
                                                      : cfg.dataset_name == "random";
    cfg.client.progress = !flags->no_progress;
    dsv4::bench::run_bench(cfg, std::cout);
  });
});

}  // namespace
