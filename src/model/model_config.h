// ModelConfig: the Hugging Face config.json of a DeepSeek-V4 checkpoint (spec §2.1), one
// field per key, HF key names. Plain value type; from_json() parses and validate()s.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dsv4::model {

// "rope_scaling": YaRN parameters (applied on ratio>0 layers only).
struct RopeScaling {
  std::string type;  // "yarn"
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;
};

// "quantization_config" of the FP8 (non-expert) linears.
struct QuantizationConfig {
  std::string quant_method = "fp8", fmt = "e4m3", scale_fmt = "ue8m0",
              activation_scheme = "dynamic";
  std::vector<int64_t> weight_block_size = {128, 128};
};

struct ModelConfig {
  std::vector<std::string> architectures = {"DeepseekV4ForCausalLM"};
  std::string model_type = "deepseek_v4";
  int64_t vocab_size = 0;
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int qk_rope_head_dim = 0;
  int q_lora_rank = 0;
  int o_groups = 0;
  int o_lora_rank = 0;
  int sliding_window = 0;
  std::vector<int> compress_ratios;  // num_hidden_layers + num_nextn_predict_layers entries
  double compress_rope_theta = 0;
  double rope_theta = 0;
  std::optional<RopeScaling> rope_scaling;
  int64_t max_position_embeddings = 0;
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  int n_routed_experts = 0;
  int num_experts_per_tok = 0;
  int n_shared_experts = 0;
  int moe_intermediate_size = 0;
  std::string scoring_func;             // sqrtsoftplus | softmax | sigmoid
  std::string topk_method = "noaux_tc";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  int num_hash_layers = 0;
  double swiglu_limit = 0;
  std::string hidden_act = "silu";
  int hc_mult = 0;
  int hc_sinkhorn_iters = 0;
  double hc_eps = 0;
  double rms_norm_eps = 0;
  int num_nextn_predict_layers = 0;
  std::string expert_dtype;             // fp4 | fp8
  QuantizationConfig quantization_config;
  bool tie_word_embeddings = false;
  int bos_token_id = 0;
  int eos_token_id = 1;                 // a JSON list is accepted; its first entry is used
  std::string torch_dtype = "bfloat16";

  // Trunk layers (= num_hidden_layers); MTP blocks follow as layers num_layers() + i.
  int num_layers() const { return num_hidden_layers; }
  // compress_ratios[layer] for 0 <= layer < num_hidden_layers + num_nextn_predict_layers.
  int compress_ratio(int layer) const;
  // Token-id hash routing: trunk layer < num_hash_layers (MTP blocks never).
  bool is_hash_layer(int layer) const;
  int rope_dim() const { return qk_rope_head_dim; }
  int nope_dim() const { return head_dim - qk_rope_head_dim; }

  // Parses a config object. Unknown keys are ignored; missing required keys, wrong JSON
  // types and failed validate() checks throw dsv4::Error naming the key.
  static ModelConfig from_json(const nlohmann::json& j);
  // from_json of a file; errors also name the path.
  static ModelConfig from_file(const std::filesystem::path& path);
  // Consistency checks (spec §2, §8 constraints); each error names the offending key.
  void validate() const;
  // All fields under their HF key names (from_json(to_json()) == *this).
  nlohmann::json to_json() const;
};

}  // namespace dsv4::model
