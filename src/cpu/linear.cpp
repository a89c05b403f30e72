#include "cpu/linear.h"

#include <cmath>

#include "base/check.h"
#include "numerics/formats.h"
#include "numerics/quant.h"

namespace dsv4::cpu {

using numerics::round_bf16;

void quantize_activation_q8(std::span<const float> x, std::vector<float>& q,
                            std::vector<float>& scales) {
  const size_t n = x.size();
  DSV4_CHECK(n % 128 == 0, "FP8 linear input width ", n, " is not a multiple of 128");
  thread_local std::vector<uint8_t> codes;
  codes.resize(n);
  q.resize(n);
  scales.resize(n / 128);
  numerics::quantize_q8(x, 128, codes, scales);
  for (size_t i = 0; i < n; ++i) q[i] = numerics::e4m3_to_float(codes[i]);
}

void Fp8Linear::forward(std::span<const float> x, std::span<float> y) const {
  DSV4_CHECK(static_cast<int64_t>(x.size()) == in && static_cast<int64_t>(y.size()) == out,
             "Fp8Linear: got ", x.size(), " -> ", y.size(), ", expected ", in, " -> ", out);
  thread_local std::vector<float> q, sx;
  quantize_activation_q8(x, q, sx);
  const int64_t kblocks = in / 128;
  const int64_t scale_cols = (in + 127) / 128;
  for (int64_t o = 0; o < out; ++o) {
    const float* w = weight.data() + o * in;
    const float* sw = scale.data() + (o / 128) * scale_cols;
    float acc = 0.0f;
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      double partial = 0.0;
      for (int64_t k = kb * 128; k < kb * 128 + 128; ++k) partial += static_cast<double>(q[k] * w[k]);
      acc += static_cast<float>(partial) * (sx[kb] * sw[kb]);
    }
    y[o] = round_bf16(acc);
  }
}

void Fp4Linear::forward(std::span<const float> x, std::span<float> y) const {
  DSV4_CHECK(static_cast<int64_t>(x.size()) == in && static_cast<int64_t>(y.size()) == out,
             "Fp4Linear: got ", x.size(), " -> ", y.size(), ", expected ", in, " -> ", out);
  thread_local std::vector<float> q, sx;
  quantize_activation_q8(x, q, sx);
  const int64_t kblocks = in / 32;
  for (int64_t o = 0; o < out; ++o) {
    const float* w = weight.data() + o * in;
    const float* sw = scale.data() + o * kblocks;
    float acc = 0.0f;
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      double partial = 0.0;
      for (int64_t k = kb * 32; k < kb * 32 + 32; ++k) partial += static_cast<double>(q[k] * w[k]);
      acc += (static_cast<float>(partial) * sx[kb / 4]) * sw[kb];
    }
    y[o] = round_bf16(acc);
  }
}

void Bf16Linear::forward(std::span<const float> x, std::span<float> y) const {
  DSV4_CHECK(static_cast<int64_t>(x.size()) == in && static_cast<int64_t>(y.size()) == out,
             "Bf16Linear: shape mismatch");
  for (int64_t o = 0; o < out; ++o) {
    const float* w = weight.data() + o * in;
    double acc = 0.0;
    for (int64_t k = 0; k < in; ++k) acc += static_cast<double>(x[k]) * w[k];
    y[o] = round_bf16(static_cast<float>(acc));
  }
}

void Fp32Linear::forward(std::span<const float> x, std::span<float> y) const {
  forward_rows(x, y, 0, out);
}

void Fp32Linear::forward_rows(std::span<const float> x, std::span<float> y, int64_t row_begin,
                              int64_t row_end) const {
  DSV4_CHECK(static_cast<int64_t>(x.size()) == in && static_cast<int64_t>(y.size()) == out,
             "Fp32Linear: shape mismatch");
  for (int64_t o = row_begin; o < row_end; ++o) {
    const float* w = weight.data() + o * in;
    double acc = 0.0;
    for (int64_t k = 0; k < in; ++k) acc += static_cast<double>(x[k]) * w[k];
    y[o] = static_cast<float>(acc);
  }
}

void rms_norm(std::span<const float> x, std::span<const float> weight, float eps,
              std::span<float> y) {
  DSV4_CHECK(x.size() == weight.size() && y.size() == x.size(), "rms_norm: size mismatch");
  double ss = 0.0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const float ms = static_cast<float>(ss / static_cast<double>(x.size()));
  const float r = 1.0f / std::sqrt(ms + eps);
  for (size_t i = 0; i < x.size(); ++i) y[i] = round_bf16(weight[i] * (x[i] * r));
}

}  // namespace dsv4::cpu
