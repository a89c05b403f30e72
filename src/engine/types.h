// Plain value types shared by the engine, the scheduler and the server. No JSON, no threads.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dsv4::engine {

// Engine-assigned id of one request/sequence; unique for the engine's lifetime.
using SequenceId = int64_t;

// The request lifecycle, in chronological order so has_reached() is a comparison.
// Transitions happen only through Sequence methods (sequence.h).
enum class RequestState : uint8_t {
  kQueued = 0,      // waiting for admission (also after a recompute preemption)
  kPrefilling = 1,  // admitted, prompt chunks being computed
  kDecoding = 2,    // prompt done, one (or more) tokens per step
  kFinished = 3,    // terminal: stop/EOS/length
  kAborted = 4,     // terminal: client abort, disconnect, shutdown or error
};

inline bool has_reached(RequestState s, RequestState target) { return s >= target; }
inline bool is_terminal(RequestState s) { return s >= RequestState::kFinished; }
const char* to_string(RequestState s);

enum class FinishReason : uint8_t { kNone, kStop, kLength, kAbort, kError };
// OpenAI spelling: "stop", "length", "abort", "error" ("" for kNone).
const char* to_string(FinishReason r);

// One sampled token with its log-probability and the `top` most likely alternatives
// (descending). Log-probabilities are of the distribution after penalties, before
// temperature/top-k/top-p (what OpenAI-compatible servers report).
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

}  // namespace dsv4::engine
