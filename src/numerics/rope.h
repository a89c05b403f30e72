// RoPE tables of DeepSeek-V4 (spec §4.7) and their application (spec §4.0).
//
// θ_i = base^(−2i/d) for pair i = 0..d/2−1 (d = rope dims = 64), computed in fp32.
// With YaRN (ratio>0 layers): low/high correction dims from beta_fast/beta_slow over the
// original context, ramp_i = clamp((i−low)/(high−low), 0, 1) indexed by PAIR (the reference
// quirk), θ_i ← θ_i/factor·ramp_i + θ_i·(1−ramp_i). Angle φ = fp32(p)·θ_i in fp32; cos/sin
// of φ in fp32. Pairs are interleaved: (x[2i], x[2i+1]) is one complex number.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4::numerics {

struct RopeParams {
  int rope_dim = 64;
  double base = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  int64_t original_seq_len = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// The YaRN correction range [low, high] (clamped to [0, rope_dim−1]).
void yarn_correction_range(const RopeParams& p, int* low, int* high);

// Frequencies per pair (rope_dim/2 values), fp32 exactly as the reference computes them.
std::vector<float> rope_frequencies(const RopeParams& p);

// cos/sin table: positions [0, cached_pos) precomputed, layout [pos][pair] {cos, sin};
// positions in [cached_pos, max_pos) are computed on the fly with the same formula.
class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(const RopeParams& p, int64_t max_pos, int64_t cached_pos = 1 << 16);
  int pairs() const { return pairs_; }
  int64_t max_pos() const { return max_pos_; }
  // Rotates the last 2·pairs values of `x` (bf16-valued floats) in place by position pos,
  // rounding the result to bf16. inverse = multiply by the conjugate.
  void apply(std::span<float> x, int64_t pos, bool inverse = false) const;
  float cos(int64_t pos, int pair) const;
  float sin(int64_t pos, int pair) const;

 private:
  int pairs_ = 0;
  int64_t max_pos_ = 0;
  int64_t cached_pos_ = 0;
  std::vector<float> freqs_;  // [pairs]
  std::vector<float> table_;  // [cached_pos, pairs, 2]
};

}  // namespace dsv4::numerics
