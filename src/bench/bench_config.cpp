#include "bench/bench_config.h"

#include <cmath>
#include <sstream>

#include "base/check.h"

namespace dsv4::bench {

Backend parse_backend(const std::string& name) {
  if (name == "openai-chat") return Backend::kOpenAiChat;
  if (name == "openai-completions" || name == "openai") return Backend::kOpenAiCompletions;
  if (name == "generate" || name == "sglang") return Backend::kGenerate;
  DSV4_FAIL("unknown backend '", name, "' (openai-chat, openai-completions, generate)");
}

std::string backend_name(Backend b) {
  switch (b) {
    case Backend::kOpenAiChat: return "openai-chat";
    case Backend::kOpenAiCompletions: return "openai-completions";
    case Backend::kGenerate: return "generate";
  }
  return "?";
}

std::vector<int> parse_concurrency_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    DSV4_CHECK(!item.empty(), "empty value in --max-concurrency '", text, "'");
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DSV4_CHECK(used == item.size() && v >= 0, "bad --max-concurrency value '", item, "'");
    out.push_back(v);
  }
  if (out.empty()) out.push_back(0);
  return out;
}

void BenchConfig::validate() const {
  DSV4_CHECK(client.base_url.rfind("http://", 0) == 0, "--base-url must start with http:// (got '",
             client.base_url, "')");
  DSV4_CHECK(dataset_name == "random" || dataset_name == "sharegpt", "unknown --dataset-name '",
             dataset_name, "' (random, sharegpt)");
  DSV4_CHECK(dataset_name != "sharegpt" || !dataset_path.empty(),
             "--dataset-name sharegpt needs --dataset-path");
  DSV4_CHECK(random_input_len >= 1 && random_output_len >= 1, "random lengths must be >= 1");
  DSV4_CHECK(random_range_ratio >= 0 && random_range_ratio <= 1,
             "--random-range-ratio must be in [0, 1]");
  DSV4_CHECK(vocab_size > 3, "--vocab-size must be > 3");
  DSV4_CHECK(num_prompts >= 1, "--num-prompts must be >= 1");
  DSV4_CHECK(warmup_requests >= 0, "--warmup-requests must be >= 0");
  DSV4_CHECK(request_rate > 0 && !std::isnan(request_rate), "--request-rate must be > 0 or inf");
  DSV4_CHECK(!max_concurrency.empty(), "--max-concurrency needs at least one value");
  DSV4_CHECK(client.request_timeout_s > 0, "--request-timeout must be > 0");
}

}  // namespace dsv4::bench
