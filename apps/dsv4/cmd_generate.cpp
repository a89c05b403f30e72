// `dsv4 generate`: greedy generation of token ids on the CPU backend. Without --model it
// uses the built-in tiny DeepSeek-V4 (random weights: the output ids are meaningless).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "apps/dsv4/commands.h"
#include "base/check.h"
#include "cpu/model.h"
#include "model/embedded_model.h"

namespace {

struct GenerateArgs {
  std::string model_dir;
  std::string prompt_ids = "0,4,15,16,23,42";
  int max_tokens = 16;
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    try {
      ids.push_back(static_cast<int32_t>(std::stol(part)));
    } catch (const std::exception&) {
      DSV4_FAIL("--prompt-ids: '", part, "' is not a token id");
    }
  }
  DSV4_CHECK(!ids.empty(), "--prompt-ids: at least one token id is needed");
  return ids;
}

void run_generate(const GenerateArgs& a) {
  DSV4_CHECK(a.max_tokens > 0, "--max-tokens must be positive, got ", a.max_tokens);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<dsv4::cpu::CpuModel> model;
  if (a.model_dir.empty()) {
    const auto config =
        dsv4::model::ModelConfig::from_json(dsv4::model::embedded_tiny_config_json());
    model = dsv4::cpu::CpuModel::from_checkpoint(config, dsv4::model::embedded_tiny_checkpoint());
    std::printf("model: built-in tiny DeepSeek-V4 (random weights; the output is meaningless)\n");
  } else {
    model = dsv4::cpu::CpuModel::load(a.model_dir);
    std::printf("model: %s\n", a.model_dir.c_str());
  }
  const auto t1 = std::chrono::steady_clock::now();
  auto state = model->new_sequence();
  std::vector<int32_t> tokens = parse_ids(a.prompt_ids);
  std::printf("prompt ids:");
  for (int32_t t : tokens) std::printf(" %d", t);
  std::printf("\ngenerated ids:");
  std::fflush(stdout);
  std::vector<int32_t> next = tokens;
  for (int i = 0; i < a.max_tokens; ++i) {
    const auto out = model->forward(state, next);
    const int32_t id = static_cast<int32_t>(
        std::max_element(out.logits.begin(), out.logits.end()) - out.logits.begin());
    std::printf(" %d", id);
    std::fflush(stdout);
    next = {id};
  }
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("\nload %.2f s, %d tokens in %.2f s (cpu backend)\n",
              std::chrono::duration<double>(t1 - t0).count(), a.max_tokens,
              std::chrono::duration<double>(t2 - t1).count());
}

const dsv4::app::CommandRegistrar kRegister([](CLI::App& root) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = root.add_subcommand("generate", "Greedy generation of token ids (CPU backend)");
  cmd->add_option("--model", args->model_dir, "model directory (default: built-in tiny model)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "comma-separated prompt token ids");
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate");
  cmd->callback([args] { run_generate(*args); });
});

}  // namespace
