// Logging facade over header-only spdlog (compiled only in log.cpp, which keeps spdlog's
// compile cost out of every other TU). Lines look like SGLang's: "[2026-01-01 12:00:00] msg".
// Thread-safe.
#pragma once

#include <string_view>

namespace dsv4::engine::log {

enum class Level { kDebug, kInfo, kWarn, kError, kOff };

void set_level(Level level);
Level level_from_string(std::string_view name);  // "debug" | "info" | "warning" | "error" | "off"
void debug(std::string_view message);
void info(std::string_view message);
void warn(std::string_view message);
void error(std::string_view message);

}  // namespace dsv4::engine::log
