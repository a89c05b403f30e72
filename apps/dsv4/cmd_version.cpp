// `dsv4 version`: prints the build's version and enabled backends.
#include <cstdio>

#include "apps/dsv4/commands.h"

namespace {
const dsv4::app::CommandRegistrar kRegister([](CLI::App& root) {
  auto* cmd = root.add_subcommand("version", "Print the dsv4 version and enabled backends");
  cmd->callback([] {
#ifdef DSV4_WITH_CUDA
    std::printf("dsv4 0.1.0 (backends: cpu, cuda)\n");
#else
    std::printf("dsv4 0.1.0 (backends: cpu)\n");
#endif
  });
});
}  // namespace
