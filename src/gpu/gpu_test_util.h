// Helpers shared by the GPU kernel tests (test-only): skip without a device, random bf16-valued
// inputs, bf16 uploads, relative error, bitwise equality, FP8 cache entries.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/kv_fp8.h"
#include "numerics/formats.h"

#define SKIP_WITHOUT_GPU() \
  if (!::dsv4::gpu::has_cuda_device()) GTEST_SKIP() << "no CUDA device"

namespace dsv4::gpu {

// n bf16-valued floats from normal(0, std), seeded.
inline std::vector<float> random_bf16(size_t n, float std, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = numerics::round_bf16(d(rng));
  return v;
}

// Max |a−b| / max(|b|, tiny) over the arrays.
inline double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(double(a[i]) - b[i]) / std::max(1e-30, std::fabs(double(b[i]))));
  return m;
}

// The bf16 bit patterns of v (round to nearest even).
inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = numerics::float_to_bf16_bits(v[i]);
  return b;
}

// Whether a and b hold the same bytes.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The bytes of entries [0, count) of an FP8 cache buffer (data then scales, entry by entry).
inline std::vector<uint8_t> fp8_entries(const DeviceBuffer<uint8_t>& buf, int64_t count) {
  const std::vector<uint8_t> v = buf.download();
  std::vector<uint8_t> out;
  for (int64_t e = 0; e < count; ++e) {
    const uint8_t* d = v.data() + kv_cache_data_offset(e);
    const uint8_t* s = v.data() + kv_cache_scale_offset(e);
    out.insert(out.end(), d, d + kKvEntryData);
    out.insert(out.end(), s, s + kKvEntryScales);
  }
  return out;
}

}  // namespace dsv4::gpu
