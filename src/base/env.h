// Environment switches for A/B runs (DSV4_... variables; read by the callers once, in a static).
#pragma once

#include <cstdlib>
#include <string_view>

namespace dsv4 {

// A switch that is on unless the variable is set to "0".
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string_view(v) != "0";
}

}  // namespace dsv4
