// Configuration of `dsv4 bench`: plain structs, filled by apps/dsv4/cmd_bench.cpp and validated once.
// Flag names follow SGLang's bench_serving (see docs/bench.md).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace dsv4::bench {

// Which endpoint the client talks to.
enum class Backend {
  kOpenAiChat,         // POST /v1/chat/completions, text prompts
  kOpenAiCompletions,  // POST /v1/completions, prompt = array of token ids (or text)
  kGenerate,           // POST /generate (SGLang native), input_ids (or text)
};

Backend parse_backend(const std::string& name);   // "openai-chat" | "openai-completions" | "generate"
std::string backend_name(Backend b);

// Settings of the HTTP client for one run.
struct ClientConfig {
  std::string base_url = "http://127.0.0.1:30000";  // http only; an optional path prefix is kept
  Backend backend = Backend::kOpenAiCompletions;
  std::string model;            // "model" field of OpenAI requests
  bool ignore_eos = true;       // sends ignore_eos + min_tokens = max_tokens
  double request_timeout_s = 600;  // per HTTP operation (connect, write, each read)
  bool progress = true;         // progress bar on stderr
};

struct BenchConfig {
  ClientConfig client;
  std::string dataset_name = "random";  // "random" | "sharegpt"
  std::string dataset_path;             // sharegpt JSON file
  int random_input_len = 1024;
  int random_output_len = 1024;
  double random_range_ratio = 0.0;      // lengths uniform in [max(1, ratio*len), len]
  int vocab_size = 128000;              // random token ids are drawn from [3, vocab_size)
  int sharegpt_output_len = 0;          // > 0 overrides the per-conversation output length
  int num_prompts = 1000;
  std::vector<int> max_concurrency;     // one run per value; 0 = unlimited
  double request_rate = std::numeric_limits<double>::infinity();  // req/s, Poisson; inf = burst
  int warmup_requests = 1;              // before each concurrency value, not measured
  uint64_t seed = 1;
  std::string output_file;              // "" = ./dsv4_bench_<backend>_<timestamp>.json
  bool output_details = false;          // per-request arrays in the JSON file

  void validate() const;  // throws dsv4::Error on an inconsistent configuration
};

// "1,8,16" -> {1, 8, 16}; "" -> {0} (unlimited). Throws dsv4::Error on bad input.
std::vector<int> parse_concurrency_list(const std::string& text);

}  // namespace dsv4::bench
