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

// The variable's integer value (std::atoi), or `fallback` when it is unset or empty.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::atoi(v);
}

}  // namespace dsv4
