// Subcommands of the `dsv4` binary. Each lives in its own cmd_<name>.cpp and registers
// itself with a file-scope CommandRegistrar; main.cpp knows none of them by name.
//
//   static const dsv4::app::CommandRegistrar kRegister([](CLI::App& root) {
//     auto* cmd = root.add_subcommand("make-tiny", "...");
//     ...
//     cmd->callback([=] { ... });   // may throw dsv4::Error
//   });
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace dsv4::app {

using CommandSetup = std::function<void(CLI::App& root)>;

// All registered setups, in static-initialization order (unspecified across files).
std::vector<CommandSetup>& command_setups();

struct CommandRegistrar {
  explicit CommandRegistrar(CommandSetup setup) { command_setups().push_back(std::move(setup)); }
};

}  // namespace dsv4::app
