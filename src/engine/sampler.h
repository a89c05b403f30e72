// Sampler: turns one logits row into one token for one request.
//
// Pipeline per call: mask ids >= sample_vocab (never sampled) -> repetition penalty (prompt
// and output ids, HF rule) -> frequency/presence penalties (output counts, OpenAI rule) ->
// logprobs (log-softmax of this row) -> greedy when temperature == 0 or top_k == 1, else
// temperature -> min_p -> top_k -> top_p -> draw with the request's own RNG.
// The draw depends only on (seed, the request's logits rows), never on other requests, so
// the same seed and request give the same tokens in a busy batch.
//
// Thread-safety: one Sampler per request, used by one thread at a time.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/sampling_params.h"
#include "engine/types.h"

namespace dsv4::engine {

// One draw handed to a device sampler (GpuRunner; gpu/sampling.h has the same semantics).
struct DeviceDraw {
  bool eligible = false;  // false: this request needs host-side state (penalties): sample on the host
  bool greedy = true;     // temperature ≈ 0 or top_k == 1
  double inv_temperature = 1.0;
  float top_p = 1.0f;
  float min_rel = -std::numeric_limits<float>::infinity();  // float(log(min_p))
  int32_t top_k = -1;
  double u = 0.0;  // this draw's uniform, already taken from the request's RNG
};

class Sampler {
 public:
  // sample_vocab: ids >= this are masked (the tokenizer's range); prompt feeds the
  // repetition penalty.
  Sampler(const SamplingParams& params, int64_t sample_vocab, uint64_t seed,
          std::span<const int32_t> prompt);

  // Samples from `logits` (one row, modified in place). Fills *logprob when non-null.
  // u: the draw's uniform when prepare_device_draw() already took it (nullptr: taken here,
  // only when the draw is not greedy).
  int32_t sample(std::span<float> logits, TokenLogprob* logprob, const double* u = nullptr);

  // The next draw for a device sampler. Takes one uniform from the RNG unless the parameters
  // make the draw greedy (as sample() does, except that sample() also skips it for an
  // all −inf row); when the row is then sampled on the host after all, pass draw.u to sample().
  DeviceDraw prepare_device_draw();

  // Records an emitted output token (for penalties). sample() does not call it.
  void observe(int32_t token);

 private:
  void apply_penalties(std::span<float> logits) const;
  // A non-greedy draw from logits (max_logit = their maximum, finite).
  int32_t draw(std::span<const float> logits, float max_logit, double u);
  bool greedy_params() const { return params_.temperature <= 1e-6f || params_.top_k == 1; }
  double inv_temperature() const { return 1.0 / params_.temperature; }
  float min_rel() const;  // log(min_p) in fp32 (−inf when min_p = 0): candidates keep rel ≥ it
  double next_uniform();  // [0, 1), 53 random bits

  SamplingParams params_;
  int64_t sample_vocab_;
  std::mt19937_64 rng_;
  std::unordered_set<int32_t> seen_;                // prompt + output ids
  std::unordered_map<int32_t, int32_t> out_counts_;  // output id -> count
  std::vector<std::pair<float, int32_t>> scratch_;
};

}  // namespace dsv4::engine
