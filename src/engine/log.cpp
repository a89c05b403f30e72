#define FMT_HEADER_ONLY 1
#include "engine/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace dsv4::engine::log {

namespace {
spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_logger_mt("dsv4");
    l->set_pattern("[%Y-%m-%d %H:%M:%S] %v");
    l->flush_on(spdlog::level::info);
    return l;
  }();
  return *instance;
}
}  // namespace

void set_level(Level level) {
  static constexpr spdlog::level::level_enum kMap[] = {spdlog::level::debug, spdlog::level::info,
                                                       spdlog::level::warn, spdlog::level::err,
                                                       spdlog::level::off};
  logger().set_level(kMap[static_cast<int>(level)]);
}

Level level_from_string(std::string_view name) {
  if (name == "debug") return Level::kDebug;
  if (name == "warning" || name == "warn") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  return Level::kInfo;
}

void debug(std::string_view m) { logger().debug("{}", m); }
void info(std::string_view m) { logger().info("{}", m); }
void warn(std::string_view m) { logger().warn("WARNING: {}", m); }
void error(std::string_view m) { logger().error("ERROR: {}", m); }

}  // namespace dsv4::engine::log
