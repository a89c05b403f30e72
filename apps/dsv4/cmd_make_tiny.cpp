// `dsv4 make-tiny --config FILE --seed N --out DIR`: writes DIR/config.json (a verbatim copy of
// FILE) and DIR/model.safetensors, a seed-deterministic random checkpoint in the real
// DeepSeek-V4 format for that config (see src/model/make_tiny.h).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "apps/dsv4/commands.h"
#include "checkpoint/checkpoint.h"
#include "model/make_tiny.h"

namespace {

struct MakeTinyOptions {
  std::string config;
  uint64_t seed = 0;
  std::string out;
};

const dsv4::app::CommandRegistrar kRegister([](CLI::App& root) {
  auto opts = std::make_shared<MakeTinyOptions>();
  auto* cmd = root.add_subcommand("make-tiny", "Write a random tiny checkpoint for a config");
  cmd->add_option("--config", opts->config, "config.json of the model")->required();
  cmd->add_option("--seed", opts->seed, "random seed (same seed, same bytes)");
  cmd->add_option("--out", opts->out, "output directory")->required();
  cmd->callback([opts] {
    const std::filesystem::path out(opts->out);
    dsv4::model::write_tiny_checkpoint(opts->config, opts->seed, out);
    const auto ckpt = dsv4::checkpoint::Checkpoint::open(out / "model.safetensors");
    std::printf("wrote %s: %zu tensors, %llu bytes of tensor data (seed %llu)\n",
                (out / "model.safetensors").c_str(), ckpt.size(),
                static_cast<unsigned long long>(ckpt.total_bytes()),
                static_cast<unsigned long long>(opts->seed));
  });
});

}  // namespace
