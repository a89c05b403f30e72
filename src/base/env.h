// Environment switches for A/B runs (DSV4_... variables; read by the callers once, in a static).
#pragma once

#include <cstdlib>
#include <string_view>
#include <vector>

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

// The integers of the comma list in the variable (e.g. "1,8,64"), in order; empty when it is
// unset or empty. Parsing stops at the first item that is not an integer.
inline std::vector<long> env_list(const char* name) {
  std::vector<long> out;
  const char* e = std::getenv(name);
  for (const char* c = e != nullptr ? e : ""; *c != '\0';) {
    char* end = nullptr;
    const long x = std::strtol(c, &end, 10);
    if (end == c) break;
    out.push_back(x);
    c = *end != '\0' ? end + 1 : end;
  }
  return out;
}

}  // namespace dsv4
