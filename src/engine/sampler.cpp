#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"

namespace dsv4::engine {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Descending by value, ties by smaller id: a total order, so results are reproducible.
bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}
}  // namespace

Sampler::Sampler(const SamplingParams& params, int64_t sample_vocab, uint64_t seed,
                 std::span<const int32_t> prompt)
    : params_(params), sample_vocab_(sample_vocab), rng_(seed) {
  DSV4_CHECK(sample_vocab > 0, "sample vocab must be positive");
  if (params_.repetition_penalty != 1.0f) seen_.insert(prompt.begin(), prompt.end());
}

void Sampler::observe(int32_t token) {
  if (params_.repetition_penalty != 1.0f) seen_.insert(token);
  if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) ++out_counts_[token];
}

DeviceDraw Sampler::prepare_device_draw() {
  DeviceDraw d;
  d.eligible = params_.repetition_penalty == 1.0f && params_.frequency_penalty == 0.0f &&
               params_.presence_penalty == 0.0f;
  d.greedy = greedy_params();
  d.inv_temperature = inv_temperature();
  d.top_p = params_.top_p;
  d.min_rel = min_rel();
  d.top_k = params_.top_k;
  if (!d.greedy) d.u = next_uniform();
  return d;
}

float Sampler::min_rel() const {
  return params_.min_p > 0 ? static_cast<float>(std::log(params_.min_p)) : kNegInf;
}

double Sampler::next_uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Sampler::apply_penalties(std::span<float> logits) const {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (params_.repetition_penalty != 1.0f) {
    for (int32_t id : seen_) {
      if (id < 0 || id >= n) continue;
      float& l = logits[id];
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }
  for (const auto& [id, count] : out_counts_) {
    if (id < 0 || id >= n) continue;
    logits[id] -= params_.frequency_penalty * static_cast<float>(count) + params_.presence_penalty;
  }
}

// Candidates (log(p_i / p_max) at temperature T, after min_p and top_k) are walked in
// descending order (ties: smaller id), as a full sort would give, but sorted lazily a block at a
// time: top_p and the draw stop early on a peaked row, so most rows never sort the vocabulary.
// p_i = float(exp(rel_i)); the total of every candidate's p_i is summed in candidate order.
int32_t Sampler::draw(std::span<const float> logits, float max_logit, double u) {
  const double inv_t = inv_temperature();
  scratch_.clear();
  const float min_r = min_rel();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float rel = static_cast<float>((logits[i] - max_logit) * inv_t);  // log(p_i / p_max)
    if (rel == kNegInf || rel < min_r) continue;
    scratch_.emplace_back(rel, static_cast<int32_t>(i));
  }
  if (params_.top_k > 0 && static_cast<int64_t>(scratch_.size()) > params_.top_k) {
    std::nth_element(scratch_.begin(), scratch_.begin() + params_.top_k, scratch_.end(), better);
    scratch_.resize(static_cast<size_t>(params_.top_k));
  }
  const auto prob = [](float rel) { return static_cast<float>(std::exp(static_cast<double>(rel))); };
  double total = 0;
  for (const auto& c : scratch_) total += prob(c.first);
  size_t sorted = 0;  // scratch_[0, sorted) holds the best candidates in order
  const auto sort_through = [&](size_t i) {
    if (i < sorted) return;
    const auto first = scratch_.begin() + static_cast<ptrdiff_t>(sorted);
    const size_t m = std::min(scratch_.size(), std::max({i + 1, size_t{64}, 4 * sorted}));
    if (m < scratch_.size()) std::nth_element(first, scratch_.begin() + static_cast<ptrdiff_t>(m), scratch_.end(), better);
    std::sort(first, scratch_.begin() + static_cast<ptrdiff_t>(m), better);
    sorted = m;
  };
  size_t keep = scratch_.size();
  if (params_.top_p < 1.0f) {
    double cum = 0;
    keep = 0;
    while (keep < scratch_.size()) {
      sort_through(keep);
      cum += prob(scratch_[keep].first);
      ++keep;
      if (cum >= params_.top_p * total) break;
    }
    total = cum;
  }
  u *= total;
  for (size_t i = 0; i < keep; ++i) {
    sort_through(i);
    const float p = prob(scratch_[i].first);
    if (u < p) return scratch_[i].second;
    u -= p;
  }
  sort_through(keep - 1);
  return scratch_[keep - 1].second;
}

int32_t Sampler::sample(std::span<float> logits, TokenLogprob* logprob, const double* u) {
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(logits.size()), sample_vocab_);
  DSV4_CHECK(n > 0, "empty logits row");
  for (int64_t i = n; i < static_cast<int64_t>(logits.size()); ++i) logits[i] = kNegInf;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) logits[i] = kNegInf;  // a broken row must not be sampled from
  }
  apply_penalties(logits);

  int32_t argmax = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[argmax]) argmax = static_cast<int32_t>(i);
  }
  const float max_logit = logits[argmax];
  double log_z = 0;
  if (logprob != nullptr) {
    double z = 0;
    for (int64_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(logits[i] - max_logit));
    log_z = std::log(z) + max_logit;
  }

  int32_t chosen = argmax;
  const bool greedy = greedy_params() || std::isinf(max_logit);
  if (!greedy) chosen = draw(logits.first(static_cast<size_t>(n)), max_logit, u != nullptr ? *u : next_uniform());

  if (logprob != nullptr) {
    logprob->id = chosen;
    logprob->logprob = static_cast<float>(logits[chosen] - log_z);
    logprob->top.clear();
    const int64_t k = std::min<int64_t>(params_.top_logprobs, n);
    if (k > 0) {
      std::vector<std::pair<float, int32_t>> all;
      all.reserve(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) all.emplace_back(logits[i], static_cast<int32_t>(i));
      std::partial_sort(all.begin(), all.begin() + k, all.end(), better);
      for (int64_t i = 0; i < k; ++i) {
        logprob->top.emplace_back(all[i].second, static_cast<float>(all[i].first - log_z));
      }
    }
  }
  return chosen;
}

}  // namespace dsv4::engine
