// Error reporting for the whole project.
//
// Inside the library we throw dsv4::Error; at boundaries (CLI, HTTP handlers, threads)
// it is caught and turned into a message or a status. DSV4_CHECK(cond, parts...) builds
// the message from its arguments with operator<< and records file:line. (__FILE__/__LINE__
// rather than std::source_location: clang 14, used for the libFuzzer builds, cannot compile
// libstdc++ 12's <source_location>.)
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace dsv4 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
[[noreturn]] void throw_check_failure(const char* cond,
                                      const std::string& message,
                                      const char* file,
                                      int line);

template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Builds a message from streamable parts: str_cat("tensor ", name, " has ", n, " dims").
template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  return detail::concat(parts...);
}

}  // namespace dsv4

// DSV4_CHECK(cond, "message parts", value, ...): throws dsv4::Error when cond is false.
#define DSV4_CHECK(cond, ...)                                                      \
  do {                                                                             \
    if (!(cond)) [[unlikely]] {                                                    \
      ::dsv4::detail::throw_check_failure(#cond, ::dsv4::detail::concat(__VA_ARGS__), \
                                          __FILE__, __LINE__);                     \
    }                                                                              \
  } while (0)

// DSV4_FAIL("message parts"...): always throws dsv4::Error.
#define DSV4_FAIL(...)                                                                   \
  ::dsv4::detail::throw_check_failure(nullptr, ::dsv4::detail::concat(__VA_ARGS__), \
                                      __FILE__, __LINE__)
