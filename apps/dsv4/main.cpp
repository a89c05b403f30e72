// dsv4 command-line entry point: parses argv with CLI11 and dispatches to a subcommand.
// A dsv4::Error from a command becomes "error: <message>" and exit status 1.
#include <cstdio>
#include <exception>

#include "apps/dsv4/commands.h"
#include "base/check.h"

namespace dsv4::app {
std::vector<CommandSetup>& command_setups() {
  static std::vector<CommandSetup> setups;
  return setups;
}
}  // namespace dsv4::app

int main(int argc, char** argv) {
  CLI::App root{"dsv4: inference server for the DeepSeek-V4 model family"};
  root.require_subcommand(1);
  for (auto& setup : dsv4::app::command_setups()) setup(root);
  try {
    root.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return root.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
