// ModelConfig parsing and validation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "base/check.h"
#include "model/embedded_model.h"
#include "model/model_config.h"

namespace dsv4::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kGolden = DSV4_GOLDEN_DIR;
const fs::path kFlashConfig = kGolden / ".." / "models" / "deepseek-v4-flash" / "config.json";

TEST(ModelConfig, FlashConfigParses) {
  if (!fs::exists(kFlashConfig)) GTEST_SKIP() << "missing " << kFlashConfig;
  const ModelConfig c = ModelConfig::from_file(kFlashConfig);
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_layers(), 43);
  EXPECT_EQ(c.num_attention_heads, 64);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_dim(), 64);
  EXPECT_EQ(c.nope_dim(), 448);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_EQ(c.sliding_window, 128);
  ASSERT_EQ(c.compress_ratios.size(), 44u);
  EXPECT_EQ(c.compress_ratio(0), 0);
  EXPECT_EQ(c.compress_ratio(1), 0);
  EXPECT_EQ(c.compress_ratio(2), 4);
  EXPECT_EQ(c.compress_ratio(3), 128);
  EXPECT_EQ(c.compress_ratio(42), 4);
  EXPECT_EQ(c.compress_ratio(43), 0);  // MTP block
  EXPECT_THROW(c.compress_ratio(44), Error);
  EXPECT_EQ(c.compress_rope_theta, 160000);
  EXPECT_EQ(c.rope_theta, 10000);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, "yarn");
  EXPECT_EQ(c.rope_scaling->factor, 16);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 65536);
  EXPECT_EQ(c.rope_scaling->beta_fast, 32);
  EXPECT_EQ(c.rope_scaling->beta_slow, 1);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.index_n_heads, 64);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_EQ(c.num_hash_layers, 3);
  EXPECT_TRUE(c.is_hash_layer(2));
  EXPECT_FALSE(c.is_hash_layer(3));
  EXPECT_FALSE(c.is_hash_layer(43));
  EXPECT_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.quantization_config.quant_method, "fp8");
  EXPECT_EQ(c.quantization_config.fmt, "e4m3");
  EXPECT_EQ(c.quantization_config.scale_fmt, "ue8m0");
  EXPECT_EQ(c.quantization_config.activation_scheme, "dynamic");
  EXPECT_EQ(c.quantization_config.weight_block_size, (std::vector<int64_t>{128, 128}));
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.architectures, (std::vector<std::string>{"DeepseekV4ForCausalLM"}));
}

TEST(ModelConfig, ProConfigParses) {
  const ModelConfig c =
      ModelConfig::from_file(fs::path(DSV4_SOURCE_DIR) / "tests/data/configs/deepseek-v4-pro.json");
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_layers(), 61);
  EXPECT_EQ(c.num_attention_heads, 128);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.o_groups, 16);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.moe_intermediate_size, 3072);
  EXPECT_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.index_topk, 1024);
  ASSERT_EQ(c.compress_ratios.size(), 62u);
  EXPECT_EQ(c.compress_ratio(0), 128);
  EXPECT_EQ(c.compress_ratio(2), 4);
  EXPECT_EQ(c.compress_ratio(61), 0);
}

TEST(ModelConfig, GoldenConfigsParse) {
  int found = 0;
  for (const char* set : {"tiny-c4", "tiny-c4-w16", "tiny-calm"}) {
    const fs::path p = kGolden / set / "config.json";
    if (!fs::exists(p)) continue;
    ++found;
    const ModelConfig c = ModelConfig::from_file(p);
    EXPECT_EQ(c.num_layers(), 4) << p;
    EXPECT_EQ(c.vocab_size, 512) << p;
    EXPECT_EQ(c.index_n_heads, 8) << p;
    EXPECT_EQ(c.compress_ratios, (std::vector<int>{0, 4, 128, 4, 0})) << p;
  }
  if (found == 0) GTEST_SKIP() << "no golden configs under " << kGolden;
}

TEST(ModelConfig, ToJsonRoundTrips) {
  const ModelConfig c = ModelConfig::from_json(embedded_tiny_config_json());
  const json j = c.to_json();
  EXPECT_EQ(ModelConfig::from_json(j).to_json(), j);
  EXPECT_EQ(j["vocab_size"], 129280);
  EXPECT_EQ(j["rope_scaling"]["factor"], 16.0);
}

TEST(ModelConfig, AcceptsExtrasAndEosList) {
  json j = embedded_tiny_config_json();
  j["some_future_key"] = {1, 2, 3};
  j["eos_token_id"] = {7, 8};
  j.erase("rope_scaling");
  const ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.eos_token_id, 7);
  EXPECT_FALSE(c.rope_scaling.has_value());
}

struct BadCase {
  const char* what;
  std::function<void(json&)> mutate;
  std::vector<std::string> needles;  // all must appear in the message
};

TEST(ModelConfig, BadConfigsNameTheKey) {
  const std::vector<BadCase> cases = {
      {"arch", [](json& j) { j["architectures"] = {"LlamaForCausalLM"}; },
       {"unsupported architecture", "LlamaForCausalLM", "architectures"}},
      {"model_type", [](json& j) { j["model_type"] = "deepseek_v41"; },
       {"unsupported architecture", "model_type"}},
      {"missing", [](json& j) { j.erase("hidden_size"); }, {"hidden_size", "missing", "integer"}},
      {"type", [](json& j) { j["hidden_size"] = "128"; }, {"hidden_size", "expected an integer"}},
      {"float for int", [](json& j) { j["num_hidden_layers"] = 4.5; },
       {"num_hidden_layers", "integer"}},
      {"number type", [](json& j) { j["swiglu_limit"] = "10"; }, {"swiglu_limit", "number"}},
      {"bool type", [](json& j) { j["norm_topk_prob"] = 1; }, {"norm_topk_prob", "boolean"}},
      {"list type", [](json& j) { j["compress_ratios"] = "0,4"; }, {"compress_ratios", "list"}},
      {"rope type", [](json& j) { j["rope_scaling"] = "yarn"; }, {"rope_scaling", "object"}},
      {"rope factor", [](json& j) { j["rope_scaling"].erase("factor"); },
       {"rope_scaling.factor", "missing"}},
      {"ratios len", [](json& j) { j["compress_ratios"] = {0, 4, 128, 4}; },
       {"compress_ratios", "4 entries", "5"}},
      {"ratio 1", [](json& j) { j["compress_ratios"] = {0, 1, 128, 4, 0}; },
       {"compress_ratios", "entry 1"}},
      {"ratio neg", [](json& j) { j["compress_ratios"] = {0, 4, -4, 4, 0}; },
       {"compress_ratios", "entry 2"}},
      {"hidden", [](json& j) { j["hidden_size"] = 192; }, {"hidden_size", "128"}},
      {"q_lora", [](json& j) { j["q_lora_rank"] = 100; }, {"q_lora_rank"}},
      {"o_lora", [](json& j) { j["o_lora_rank"] = 60; }, {"o_lora_rank", "o_groups"}},
      {"moe inter", [](json& j) { j["moe_intermediate_size"] = 96; }, {"moe_intermediate_size"}},
      {"nope", [](json& j) { j["qk_rope_head_dim"] = 32; }, {"head_dim", "64"}},
      {"rope odd", [](json& j) { j["qk_rope_head_dim"] = 63; }, {"qk_rope_head_dim", "odd"}},
      {"index pow2", [](json& j) { j["index_head_dim"] = 96; }, {"index_head_dim", "power of two"}},
      {"index small", [](json& j) { j["index_head_dim"] = 32; }, {"index_head_dim", "qk_rope_head_dim"}},
      {"groups", [](json& j) { j["num_attention_heads"] = 3; }, {"o_groups", "divisible"}},
      {"wo_a dim", [](json& j) { j["head_dim"] = 576; }, {"o_groups", "576", "128"}},
      {"topk", [](json& j) { j["num_experts_per_tok"] = 9; }, {"num_experts_per_tok", "n_routed_experts"}},
      {"kv heads", [](json& j) { j["num_key_value_heads"] = 2; }, {"num_key_value_heads"}},
      {"shared", [](json& j) { j["n_shared_experts"] = 2; }, {"n_shared_experts"}},
      {"hash", [](json& j) { j["num_hash_layers"] = 5; }, {"num_hash_layers", "num_hidden_layers"}},
      {"hc", [](json& j) { j["hc_mult"] = 0; }, {"hc_mult"}},
      {"scoring", [](json& j) { j["scoring_func"] = "relu"; }, {"scoring_func", "relu"}},
      {"expert dtype", [](json& j) { j["expert_dtype"] = "fp16"; }, {"expert_dtype", "fp16"}},
      {"vocab", [](json& j) { j["vocab_size"] = 0; }, {"vocab_size", "positive"}},
      {"window", [](json& j) { j["sliding_window"] = -1; }, {"sliding_window", "positive"}},
      {"eps", [](json& j) { j["rms_norm_eps"] = 0; }, {"rms_norm_eps", "positive"}},
      {"block", [](json& j) { j["quantization_config"]["weight_block_size"] = {64, 64}; },
       {"quantization_config.weight_block_size"}},
      {"not object", [](json& j) { j = json::array(); }, {"JSON object"}},
  };
  for (const auto& bad : cases) {
    json j = embedded_tiny_config_json();
    bad.mutate(j);
    try {
      ModelConfig::from_json(j);
      ADD_FAILURE() << bad.what << ": accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      for (const auto& n : bad.needles)
        EXPECT_NE(msg.find(n), std::string::npos) << bad.what << ": '" << n << "' not in: " << msg;
    }
  }
}

TEST(ModelConfig, FromFileNamesThePath) {
  const fs::path p = fs::path(testing::TempDir()) / "dsv4_bad_config.json";
  {
    json j = embedded_tiny_config_json();
    j["hc_mult"] = 0;
    std::ofstream(p) << j.dump();
  }
  try {
    ModelConfig::from_file(p);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hc_mult"), std::string::npos) << e.what();
  }
  std::ofstream(p) << "{ not json";
  EXPECT_THROW(ModelConfig::from_file(p), Error);
  fs::remove(p);
  EXPECT_THROW(ModelConfig::from_file(p), Error);
}

}  // namespace
}  // namespace dsv4::model
