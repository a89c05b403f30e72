// Prompts for the benchmark.
//
// random: token-id prompts of exactly the sampled length (sent as ids to /generate and
//   /v1/completions) plus a text rendering of the same length in random common English words for
//   /v1/chat/completions. Words approximate tokens (most are one token with the leading space);
//   the server-reported usage.prompt_tokens is what the metrics count.
// sharegpt: conversations[0] (human) is the prompt text; the output length is the word count of
//   conversations[1] (gpt) x 1.3 (no tokenizer here), unless overridden. The input length estimate
//   is likewise words x 1.3.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::bench {

struct BenchPrompt {
  std::string text;             // always set (chat backends send it)
  std::vector<int32_t> ids;     // set for the random dataset; ids win over text where allowed
  int prompt_len = 0;           // tokens (exact for ids, estimated for text)
  int output_len = 0;           // max_tokens to request
};

// num_prompts prompts, lengths uniform in [max(1, floor(ratio*len)), len], ids in [3, vocab_size).
// Deterministic for a given seed.
std::vector<BenchPrompt> make_random_dataset(int num_prompts, int input_len, int output_len,
                                             double range_ratio, int vocab_size, uint64_t seed);

// Reads a ShareGPT JSON file ([{"conversations":[{"from":"human","value":..},{"from":"gpt",..}]}]),
// skips conversations with fewer than two turns, shuffles with seed and keeps num_prompts
// (fewer when the file is short). output_len_override > 0 replaces the estimated output length.
std::vector<BenchPrompt> load_sharegpt_dataset(const std::string& path, int num_prompts,
                                               int output_len_override, uint64_t seed);

// Number of whitespace-separated words in text.
int count_words(const std::string& text);

}  // namespace dsv4::bench
