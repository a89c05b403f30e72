// Sequence: the engine-side state of one request (spec §5.1 lists the cache it owns, which
// lives in the KvCacheManager under the same id). Owned by the engine thread only.
// State changes go through the methods below, which enforce the lifecycle order.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/text_stream.h"
#include "engine/types.h"

namespace dsv4::engine {

using Clock = std::chrono::steady_clock;

// One engine -> client update. Carries the tokens/text produced since the previous event.
struct OutputEvent {
  std::string text;                     // new text, stop strings removed
  std::vector<int32_t> token_ids;       // new tokens (EOS / stop ids excluded)
  std::vector<TokenLogprob> logprobs;   // one per token in token_ids when requested
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string matched_stop;             // stop string that ended generation, if any
  std::string error;                    // set with kError / kAbort
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;        // total so far
};

// Receives events on the engine thread. Must be cheap and must not block or throw.
using OutputSink = std::function<void(OutputEvent&&)>;

struct Sequence {
  SequenceId id = 0;
  SamplingParams params;
  OutputSink sink;
  std::vector<int32_t> tokens;  // prompt followed by output tokens
  int64_t prompt_len = 0;
  int64_t num_computed = 0;     // tokens whose state is in the cache
  int64_t num_output = 0;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<Detokenizer> detok;  // may be null (no text output)
  StopMatcher stop;
  Clock::time_point arrival{}, admitted{}, first_token{}, last_token{};
  bool ever_admitted = false;

  RequestState state() const { return state_; }
  int64_t remaining_prefill() const { return static_cast<int64_t>(tokens.size()) - num_computed; }

  void admit() {
    DSV4_CHECK(state_ == RequestState::kQueued, "admit from ", to_string(state_));
    state_ = RequestState::kPrefilling;
  }
  void start_decode() {
    DSV4_CHECK(state_ == RequestState::kPrefilling, "start_decode from ", to_string(state_));
    state_ = RequestState::kDecoding;
  }
  // Recompute preemption: back to the queue, the cache is dropped, tokens are kept.
  void preempt() {
    DSV4_CHECK(state_ == RequestState::kPrefilling || state_ == RequestState::kDecoding, "preempt from ",
               to_string(state_));
    state_ = RequestState::kQueued;
    num_computed = 0;
  }
  void finish() {
    DSV4_CHECK(!is_terminal(state_), "finish from ", to_string(state_));
    state_ = RequestState::kFinished;
  }
  void abort() {
    if (!is_terminal(state_)) state_ = RequestState::kAborted;
  }

 private:
  RequestState state_ = RequestState::kQueued;
};

}  // namespace dsv4::engine
