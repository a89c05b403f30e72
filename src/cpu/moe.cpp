#include "cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "numerics/formats.h"

namespace dsv4::cpu {
namespace {

float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

// SwiGLU expert with the reference clamps; `weight` (routing weight) scales the fp32
// activation before it is rounded to bf16 and fed to the down projection.
void expert_forward(std::span<const float> x, const ExpertWeights& e, float limit, const float* weight,
                    std::span<float> out) {
  const bool fp4 = e.w1_fp4.has_value();
  const int64_t inter = fp4 ? e.w1_fp4->out : e.w1_fp8->out;
  thread_local std::vector<float> gate, up;
  gate.resize(static_cast<size_t>(inter));
  up.resize(static_cast<size_t>(inter));
  if (fp4) {
    e.w1_fp4->forward(x, gate);
    e.w3_fp4->forward(x, up);
  } else {
    e.w1_fp8->forward(x, gate);
    e.w3_fp8->forward(x, up);
  }
  for (int64_t i = 0; i < inter; ++i) {
    float g = gate[i], u = up[i];
    if (limit > 0) {
      u = std::clamp(u, -limit, limit);
      g = std::min(g, limit);
    }
    float h = (g / (1.0f + std::exp(-g))) * u;
    if (weight != nullptr) h = *weight * h;
    gate[i] = numerics::round_bf16(h);
  }
  if (fp4) {
    e.w2_fp4->forward(gate, out);
  } else {
    e.w2_fp8->forward(gate, out);
  }
}

}  // namespace

Routing route_token(std::span<const float> x, int32_t token, const MoeWeights& w,
                    const MoeParams& p) {
  const int64_t num_experts = w.gate.out;
  std::vector<float> scores(static_cast<size_t>(num_experts));
  w.gate.forward(x, scores);
  for (float& s : scores) s = std::sqrt(softplus(s));
  Routing r;
  if (p.hash) {
    const int64_t rows = static_cast<int64_t>(w.tid2eid.size()) / p.top_k;
    DSV4_CHECK(token >= 0 && token < rows, "token id ", token, " outside tid2eid's ", rows, " rows");
    r.experts.assign(w.tid2eid.begin() + token * p.top_k, w.tid2eid.begin() + (token + 1) * p.top_k);
  } else {
    std::vector<float> biased(scores);
    for (int64_t e = 0; e < num_experts; ++e) biased[e] += w.bias[e];
    std::vector<int32_t> order(static_cast<size_t>(num_experts));
    std::iota(order.begin(), order.end(), 0);
    // Descending score; exact ties keep the lower expert id first.
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return biased[a] > biased[b]; });
    r.experts.assign(order.begin(), order.begin() + p.top_k);
  }
  float sum = 0.0f;
  for (int32_t e : r.experts) {
    r.weights.push_back(scores[e]);
    sum += scores[e];
  }
  for (float& v : r.weights) {
    v /= sum;
    v *= p.route_scale;
  }
  return r;
}

void moe_forward(std::span<const float> x, int32_t token, const MoeWeights& w, const MoeParams& p,
                 std::span<float> f, Routing* routing_out) {
  const Routing r = route_token(x, token, w, p);
  const size_t d = x.size();
  std::vector<float> acc(d, 0.0f), out(d);
  // The reference loops over experts in ascending id, adding each one's bf16 output in fp32.
  std::vector<int> order(r.experts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return r.experts[a] < r.experts[b]; });
  for (int j : order) {
    expert_forward(x, w.experts[r.experts[j]], p.swiglu_limit, &r.weights[j], out);
    for (size_t k = 0; k < d; ++k) acc[k] += out[k];
  }
  expert_forward(x, w.shared, p.swiglu_limit, nullptr, out);
  for (size_t k = 0; k < d; ++k) f[k] = numerics::round_bf16(acc[k] + out[k]);
  if (routing_out != nullptr) *routing_out = r;
}

}  // namespace dsv4::cpu
