#include "numerics/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/check.h"
#include "numerics/formats.h"

namespace dsv4::numerics {
namespace {

double correction_dim(double num_rotations, int dim, double base, int64_t max_seq_len) {
  return dim * std::log(static_cast<double>(max_seq_len) / (num_rotations * 2 * std::numbers::pi)) /
         (2 * std::log(base));
}

}  // namespace

void yarn_correction_range(const RopeParams& p, int* low, int* high) {
  const int lo = static_cast<int>(
      std::floor(correction_dim(p.beta_fast, p.rope_dim, p.base, p.original_seq_len)));
  const int hi = static_cast<int>(
      std::ceil(correction_dim(p.beta_slow, p.rope_dim, p.base, p.original_seq_len)));
  *low = std::max(lo, 0);
  *high = std::min(hi, p.rope_dim - 1);
}

std::vector<float> rope_frequencies(const RopeParams& p) {
  const int pairs = p.rope_dim / 2;
  std::vector<float> freqs(pairs);
  for (int i = 0; i < pairs; ++i) {
    // torch: 1.0 / (base ** (arange(0, dim, 2, fp32) / dim)) in fp32.
    const float expo = static_cast<float>(2 * i) / static_cast<float>(p.rope_dim);
    const float powed = std::pow(static_cast<float>(p.base), expo);
    freqs[i] = 1.0f / powed;
  }
  if (p.yarn && p.original_seq_len > 0) {
    int low, high;
    yarn_correction_range(p, &low, &high);
    float lo = static_cast<float>(low), hi = static_cast<float>(high);
    if (lo == hi) hi += 0.001f;
    const float factor = static_cast<float>(p.factor);
    for (int i = 0; i < pairs; ++i) {
      const float ramp = std::clamp((static_cast<float>(i) - lo) / (hi - lo), 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      freqs[i] = freqs[i] / factor * (1.0f - smooth) + freqs[i] * smooth;
    }
  }
  return freqs;
}

RopeTable::RopeTable(const RopeParams& p, int64_t max_pos, int64_t cached_pos)
    : pairs_(p.rope_dim / 2), max_pos_(max_pos), cached_pos_(std::min(max_pos, cached_pos)) {
  DSV4_CHECK(p.rope_dim % 2 == 0 && p.rope_dim > 0, "rope dim ", p.rope_dim, " must be even");
  freqs_ = rope_frequencies(p);
  table_.resize(static_cast<size_t>(cached_pos_) * pairs_ * 2);
  for (int64_t pos = 0; pos < cached_pos_; ++pos) {
    for (int i = 0; i < pairs_; ++i) {
      const float angle = static_cast<float>(pos) * freqs_[i];
      table_[(pos * pairs_ + i) * 2] = static_cast<float>(std::cos(static_cast<double>(angle)));
      table_[(pos * pairs_ + i) * 2 + 1] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

float RopeTable::cos(int64_t pos, int pair) const {
  if (pos < cached_pos_) return table_[(pos * pairs_ + pair) * 2];
  return static_cast<float>(std::cos(static_cast<double>(static_cast<float>(pos) * freqs_[pair])));
}

float RopeTable::sin(int64_t pos, int pair) const {
  if (pos < cached_pos_) return table_[(pos * pairs_ + pair) * 2 + 1];
  return static_cast<float>(std::sin(static_cast<double>(static_cast<float>(pos) * freqs_[pair])));
}

void RopeTable::apply(std::span<float> x, int64_t pos, bool inverse) const {
  DSV4_CHECK(pos >= 0 && pos < max_pos_, "position ", pos, " beyond the RoPE table (",
             max_pos_, " positions)");
  DSV4_CHECK(x.size() >= static_cast<size_t>(2 * pairs_), "RoPE input too short");
  float* r = x.data() + x.size() - 2 * pairs_;
  for (int i = 0; i < pairs_; ++i) {
    const float c = cos(pos, i);
    const float s = inverse ? -sin(pos, i) : sin(pos, i);
    const float a = r[2 * i], b = r[2 * i + 1];
    r[2 * i] = round_bf16(a * c - b * s);
    r[2 * i + 1] = round_bf16(a * s + b * c);
  }
}

}  // namespace dsv4::numerics
