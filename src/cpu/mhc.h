// Manifold-constrained hyper-connections on the CPU (spec §4.3), one token at a time.
// Streams X are [hc, D] bf16 values (stream-major, as the reference flattens them).
#pragma once

#include <span>

#include "cpu/weights.h"

namespace dsv4::cpu {

struct HcParams {
  int hc = 4;
  int sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
};

// HC_pre: x = bf16(Σ_i pre_i·X_i); also returns post [hc] and comb [hc, hc] (row = input).
void hc_pre(std::span<const float> streams, const HcWeights& w, const HcParams& p,
            std::span<float> x, std::span<float> post, std::span<float> comb);

// HC_post: X'_j = bf16(post_j·f + Σ_i comb[i][j]·X_i), in place on `streams`.
void hc_post(std::span<const float> f, std::span<const float> post, std::span<const float> comb,
             int hc, std::span<float> streams);

// HC_head: y = bf16(Σ_i (sigmoid(mix_i·scale + base_i) + eps)·X_i).
void hc_head(std::span<const float> streams, const HcWeights& w, const HcParams& p,
             std::span<float> y);

}  // namespace dsv4::cpu
