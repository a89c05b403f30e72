// Where programmatic dependent launch is used (host side; the kernels' half is pdl.cuh).
#pragma once

#include <cstdint>
#include <cstdlib>

namespace dsv4::gpu {

// Launches use the attribute only inside a PdlScope(true) on the launching thread (GpuModel:
// decode passes of at most kPdlMaxRows rows — measured on 2×H200 TP2, Flash 8K: batch 1 step
// 11.69 → 10.65 ms, batch 16 25.09 → 25.44 ms, batch 64 48.06 → 48.98 ms) and unless DSV4_PDL=0.
constexpr int64_t kPdlMaxRows = 8;
// kPdlMaxRows, or DSV4_PDL_MAX_ROWS when set (A/B timing of the threshold).
inline int64_t pdl_max_rows() {
  static const int64_t rows = [] {
    const char* v = std::getenv("DSV4_PDL_MAX_ROWS");
    return v != nullptr && v[0] != '\0' ? std::atoll(v) : kPdlMaxRows;
  }();
  return rows;
}
inline thread_local bool t_pdl_scope = false;

inline bool pdl_enabled() {
  static const bool allowed = [] {
    const char* v = std::getenv("DSV4_PDL");
    return !(v != nullptr && v[0] == '0');
  }();
  return allowed && t_pdl_scope;
}

class PdlScope {
 public:
  explicit PdlScope(bool on) : prev_(t_pdl_scope) { t_pdl_scope = on; }
  ~PdlScope() { t_pdl_scope = prev_; }
  PdlScope(const PdlScope&) = delete;
  PdlScope& operator=(const PdlScope&) = delete;

 private:
  bool prev_;
};

}  // namespace dsv4::gpu
