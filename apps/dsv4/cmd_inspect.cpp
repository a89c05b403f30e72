// `dsv4 inspect --model DIR`: parses DIR/config.json, opens the checkpoint in DIR, checks it
// against the tensor inventory and prints a one-screen summary. Any problem is an error
// (exit status 1).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/dsv4/commands.h"
#include "checkpoint/checkpoint.h"
#include "model/model_config.h"
#include "model/tensor_inventory.h"

namespace {

using dsv4::model::ModelConfig;

std::string layer_kind(int ratio) {
  if (ratio == 0) return "SWA";
  if (ratio == 4) return "CSA";
  return "HCA";
}

// "0, 1, 2 (3)" — the list and its length.
std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s + " (" + std::to_string(items.size()) + ")";
}

std::string human_bytes(uint64_t n) {
  char buf[64];
  if (n >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", n / double(1ull << 30));
  else if (n >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", n / double(1ull << 20));
  else std::snprintf(buf, sizeof buf, "%.2f KiB", n / 1024.0);
  return std::to_string(n) + " bytes = " + buf;
}

void inspect(const std::filesystem::path& dir) {
  const ModelConfig cfg = ModelConfig::from_file(dir / "config.json");
  const auto ckpt = dsv4::checkpoint::Checkpoint::open(dir);
  dsv4::model::verify_checkpoint(ckpt, cfg);

  std::printf("model      %s\n", dir.c_str());
  std::printf("arch       %s: vocab %lld, hidden %d, heads %d x %d (rope %d), q_lora %d, "
              "o %d x %d\n",
              cfg.architectures[0].c_str(), static_cast<long long>(cfg.vocab_size),
              cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim, cfg.rope_dim(),
              cfg.q_lora_rank, cfg.o_groups, cfg.o_lora_rank);
  std::printf("moe        %d experts, top-%d, %d shared, inter %d, %s, experts %s\n",
              cfg.n_routed_experts, cfg.num_experts_per_tok, cfg.n_shared_experts,
              cfg.moe_intermediate_size, cfg.scoring_func.c_str(), cfg.expert_dtype.c_str());
  std::printf("attention  window %d, index %d heads x %d, top-%d, max positions %lld\n",
              cfg.sliding_window, cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk,
              static_cast<long long>(cfg.max_position_embeddings));

  std::map<std::string, std::vector<std::string>> kinds;
  std::vector<std::string> hash;
  const int total = cfg.num_layers() + cfg.num_nextn_predict_layers;
  for (int l = 0; l < total; ++l) {
    const int r = cfg.compress_ratio(l);
    const std::string name = l < cfg.num_layers() ? std::to_string(l)
                                                  : "mtp." + std::to_string(l - cfg.num_layers());
    std::string kind = layer_kind(r);
    if (r != 0) kind += " (ratio " + std::to_string(r) + ")";
    kinds[kind].push_back(name);
    if (cfg.is_hash_layer(l)) hash.push_back(name);
  }
  std::printf("layers     %d trunk + %d MTP\n", cfg.num_layers(), cfg.num_nextn_predict_layers);
  for (const auto& [kind, layers] : kinds) {
    std::printf("  %-16s %s\n", kind.c_str(), join(layers).c_str());
  }
  std::printf("  %-16s %s\n", "hash routing", join(hash).c_str());

  std::map<std::string, std::pair<size_t, uint64_t>> by_dtype;
  for (const auto& name : ckpt.names()) {
    const auto& t = ckpt.at(name);
    auto& [count, bytes] = by_dtype[std::string(dsv4::checkpoint::dtype_name(t.dtype))];
    ++count;
    bytes += t.nbytes;
  }
  std::printf("tensors    %zu in %zu file(s), %s\n", ckpt.size(), ckpt.files().size(),
              human_bytes(ckpt.total_bytes()).c_str());
  for (const auto& [dtype, cb] : by_dtype) {
    std::printf("  %-8s %8zu tensors  %s\n", dtype.c_str(), cb.first, human_bytes(cb.second).c_str());
  }
  std::printf("verify     OK: every tensor matches the DeepSeek-V4 inventory for this config\n");
}

const dsv4::app::CommandRegistrar kRegister([](CLI::App& root) {
  auto dir = std::make_shared<std::string>();
  auto* cmd = root.add_subcommand("inspect", "Check a model directory and summarize it");
  cmd->add_option("--model", *dir, "directory with config.json and the safetensors")->required();
  cmd->callback([dir] { inspect(*dir); });
});

}  // namespace
