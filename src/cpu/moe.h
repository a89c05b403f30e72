// Mixture of experts on the CPU (spec §4.8), one token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpu/weights.h"

namespace dsv4::cpu {

struct MoeParams {
  int top_k = 6;
  float route_scale = 1.5f;
  float swiglu_limit = 10.0f;  // 0 = no clamp
  bool hash = false;           // route by tid2eid[token]
};

// Routing decision of one token: expert ids in the reference's order (tid2eid order on hash
// layers, top-k order otherwise) and their fp32 weights (normalized × route_scale).
struct Routing {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routing route_token(std::span<const float> x, int32_t token, const MoeWeights& w,
                    const MoeParams& p);

// f = bf16( Σ_{routed, ascending id} float(expert_e(x, w_e)) + float(shared(x)) ).
void moe_forward(std::span<const float> x, int32_t token, const MoeWeights& w, const MoeParams& p,
                 std::span<float> f, Routing* routing_out = nullptr);

}  // namespace dsv4::cpu
