#include "numerics/sinkhorn.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace dsv4::numerics {
namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void hc_split_sinkhorn(std::span<const float> mixes, std::span<const float> scale,
                       std::span<const float> base, int n, int iters, float eps,
                       std::span<float> pre, std::span<float> post, std::span<float> comb) {
  const size_t mix = static_cast<size_t>(n) * (2 + n);
  DSV4_CHECK(mixes.size() == mix && base.size() == mix && scale.size() == 3 &&
                 pre.size() == static_cast<size_t>(n) && post.size() == static_cast<size_t>(n) &&
                 comb.size() == static_cast<size_t>(n) * n,
             "hc_split_sinkhorn: bad sizes");
  DSV4_CHECK(iters >= 1, "hc_sinkhorn_iters must be >= 1");
  for (int i = 0; i < n; ++i) {
    pre[i] = sigmoid(std::fma(mixes[i], scale[0], base[i])) + eps;
    post[i] = 2.0f * sigmoid(std::fma(mixes[n + i], scale[1], base[n + i]));
  }
  for (int i = 0; i < n; ++i) {
    float* row = comb.data() + i * n;
    for (int j = 0; j < n; ++j) row[j] = std::fma(mixes[2 * n + n * i + j], scale[2], base[2 * n + n * i + j]);
    float m = row[0];
    for (int j = 1; j < n; ++j) m = std::max(m, row[j]);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - m);
      sum += row[j];
    }
    for (int j = 0; j < n; ++j) row[j] = row[j] / sum + eps;
  }
  auto normalize_columns = [&] {
    for (int j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int i = 0; i < n; ++i) s += comb[i * n + j];
      for (int i = 0; i < n; ++i) comb[i * n + j] = comb[i * n + j] / (s + eps);
    }
  };
  auto normalize_rows = [&] {
    for (int i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int j = 0; j < n; ++j) s += comb[i * n + j];
      for (int j = 0; j < n; ++j) comb[i * n + j] = comb[i * n + j] / (s + eps);
    }
  };
  normalize_columns();
  for (int it = 0; it < iters - 1; ++it) {
    normalize_rows();
    normalize_columns();
  }
}

}  // namespace dsv4::numerics
