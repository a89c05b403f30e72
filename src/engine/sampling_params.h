// Per-request sampling parameters: already validated by the server's protocol module.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsv4::engine {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  float top_p = 1.0f;               // (0, 1]
  int32_t top_k = -1;               // <= 0: disabled
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; HF-style, over prompt and output tokens
  float frequency_penalty = 0.0f;   // [-2, 2]; OpenAI-style, over output tokens
  float presence_penalty = 0.0f;    // [-2, 2]; OpenAI-style, over output tokens
  std::optional<uint64_t> seed;     // own RNG per request; unset = engine-random seed
  int64_t max_tokens = 16;          // >= 1 new tokens
  int64_t min_tokens = 0;           // EOS/stop ids ignored before this many tokens
  std::vector<std::string> stop;    // matched on detokenized text, never emitted
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;            // report the sampled token's logprob
  int32_t top_logprobs = 0;         // 0..20 alternatives per position
  bool skip_special_tokens = true;  // passed to the detokenizer factory
};

}  // namespace dsv4::engine
