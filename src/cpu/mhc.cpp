#include "cpu/mhc.h"

#include <cmath>
#include <vector>

#include "base/check.h"
#include "numerics/formats.h"
#include "numerics/sinkhorn.h"

namespace dsv4::cpu {
namespace {

// mixes = (fn · v) · rsqrt(mean(v²) + eps), v = flattened streams in fp32.
void stream_mixes(std::span<const float> streams, const HcWeights& w, float norm_eps,
                  std::vector<float>& mixes) {
  double ss = 0.0;
  for (float v : streams) ss += static_cast<double>(v) * v;
  const float ms = static_cast<float>(ss / static_cast<double>(streams.size()));
  const float r = 1.0f / std::sqrt(ms + norm_eps);
  mixes.resize(static_cast<size_t>(w.fn.out));
  w.fn.forward(streams, mixes);
  for (float& m : mixes) m *= r;
}

void weighted_stream_sum(std::span<const float> streams, std::span<const float> pre, int hc,
                         std::span<float> x) {
  const size_t d = x.size();
  for (size_t k = 0; k < d; ++k) {
    float s = pre[0] * streams[k];
    for (int i = 1; i < hc; ++i) s += pre[i] * streams[i * d + k];
    x[k] = numerics::round_bf16(s);
  }
}

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

}  // namespace

void hc_pre(std::span<const float> streams, const HcWeights& w, const HcParams& p,
            std::span<float> x, std::span<float> post, std::span<float> comb) {
  thread_local std::vector<float> mixes, pre;
  stream_mixes(streams, w, p.norm_eps, mixes);
  pre.resize(static_cast<size_t>(p.hc));
  numerics::hc_split_sinkhorn(mixes, w.scale, w.base, p.hc, p.sinkhorn_iters, p.hc_eps, pre, post,
                              comb);
  weighted_stream_sum(streams, pre, p.hc, x);
}

void hc_post(std::span<const float> f, std::span<const float> post, std::span<const float> comb,
             int hc, std::span<float> streams) {
  const size_t d = f.size();
  thread_local std::vector<float> out;
  out.resize(streams.size());
  for (int j = 0; j < hc; ++j) {
    for (size_t k = 0; k < d; ++k) {
      float mix = comb[0 * hc + j] * streams[k];
      for (int i = 1; i < hc; ++i) mix += comb[i * hc + j] * streams[i * d + k];
      out[j * d + k] = numerics::round_bf16(post[j] * f[k] + mix);
    }
  }
  std::copy(out.begin(), out.end(), streams.begin());
}

void hc_head(std::span<const float> streams, const HcWeights& w, const HcParams& p,
             std::span<float> y) {
  thread_local std::vector<float> mixes, pre;
  stream_mixes(streams, w, p.norm_eps, mixes);
  DSV4_CHECK(static_cast<int>(mixes.size()) == p.hc, "hc_head_fn must have hc rows");
  pre.resize(static_cast<size_t>(p.hc));
  for (int i = 0; i < p.hc; ++i) pre[i] = sigmoid(mixes[i] * w.scale[0] + w.base[i]) + p.hc_eps;
  weighted_stream_sum(streams, pre, p.hc, y);
}

}  // namespace dsv4::cpu
