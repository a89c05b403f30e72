#include "model/embedded_model.h"

#include "model/make_tiny.h"
#include "model/model_config.h"

namespace dsv4::model {

nlohmann::json embedded_tiny_config_json() {
  return nlohmann::json::parse(R"({
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "vocab_size": 129280, "hidden_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64,
    "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64,
    "sliding_window": 128, "compress_ratios": [0, 4, 128, 4, 0],
    "compress_rope_theta": 160000, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "max_position_embeddings": 4096,
    "index_n_heads": 2, "index_head_dim": 128, "index_topk": 4,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
    "moe_intermediate_size": 128, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc",
    "norm_topk_prob": true, "routed_scaling_factor": 1.5, "num_hash_layers": 1,
    "swiglu_limit": 10.0, "hidden_act": "silu",
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
    "num_nextn_predict_layers": 1, "expert_dtype": "fp4",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                            "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
    "tie_word_embeddings": false, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16"
  })");
}

checkpoint::Checkpoint embedded_tiny_checkpoint(uint64_t seed) {
  const ModelConfig cfg = ModelConfig::from_json(embedded_tiny_config_json());
  return checkpoint::Checkpoint::from_buffer(make_tiny_checkpoint_bytes(cfg, seed),
                                             "<embedded tiny model>");
}

}  // namespace dsv4::model
