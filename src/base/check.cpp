#include "base/check.h"

#include <filesystem>

namespace dsv4::detail {

void throw_check_failure(const char* cond,
                         const std::string& message,
                         const char* file,
                         int line) {
  // Messages are meant for users: the message first, the code location last.
  std::ostringstream out;
  out << message;
  if (message.empty() && cond != nullptr) out << "check failed: " << cond;
  out << " [" << std::filesystem::path(file).filename().string() << ":" << line << "]";
  throw Error(out.str());
}

}  // namespace dsv4::detail
