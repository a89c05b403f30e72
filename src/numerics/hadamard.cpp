#include "numerics/hadamard.h"

#include <cmath>
#include <vector>

#include "base/check.h"
#include "numerics/formats.h"

namespace dsv4::numerics {

void hadamard_bf16(std::span<float> x) {
  const size_t n = x.size();
  DSV4_CHECK(n > 0 && (n & (n - 1)) == 0, "Hadamard length ", n, " is not a power of two");
  thread_local std::vector<double> buf;
  buf.assign(x.begin(), x.end());
  for (size_t h = 1; h < n; h *= 2) {
    for (size_t i = 0; i < n; i += 2 * h) {
      for (size_t j = i; j < i + h; ++j) {
        const double a = buf[j], b = buf[j + h];
        buf[j] = a + b;
        buf[j + h] = a - b;
      }
    }
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (size_t i = 0; i < n; ++i) x[i] = round_bf16(static_cast<float>(buf[i]) * scale);
}

}  // namespace dsv4::numerics
