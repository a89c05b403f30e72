#include "model/model_config.h"

#include <fstream>
#include <limits>

#include "base/check.h"

namespace dsv4::model {
namespace {

using nlohmann::json;

std::string brief(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Reads typed values out of one JSON object; `prefix` qualifies nested keys in messages
// ("rope_scaling.factor").
class KeyReader {
 public:
  KeyReader(const json& j, std::string prefix) : j_(j), prefix_(std::move(prefix)) {}

  // Returns the value or nullptr when absent (null counts as absent for optional keys).
  const json* get(const char* key, const char* expected, bool required) const {
    auto it = j_.find(key);
    if (it == j_.end() || (!required && it->is_null())) {
      DSV4_CHECK(!required, "config key ", prefix_, key, " is missing (expected ", expected, ")");
      return nullptr;
    }
    return &*it;
  }
  [[noreturn]] void type_error(const char* key, const char* expected, const json& v) const {
    DSV4_FAIL("config key ", prefix_, key, ": expected ", expected, ", got ", v.type_name(), " ",
              brief(v));
  }

  void read(const char* key, int64_t& out, bool required = true) const {
    if (const json* v = get(key, "an integer", required)) {
      if (!v->is_number_integer()) type_error(key, "an integer", *v);
      if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
        type_error(key, "an integer that fits int64", *v);
      out = v->get<int64_t>();
    }
  }
  void read(const char* key, int& out, bool required = true) const {
    int64_t wide = out;
    read(key, wide, required);
    DSV4_CHECK(wide >= std::numeric_limits<int>::min() && wide <= std::numeric_limits<int>::max(),
               "config key ", prefix_, key, ": ", wide, " does not fit a 32-bit integer");
    out = static_cast<int>(wide);
  }
  void read(const char* key, double& out, bool required = true) const {
    if (const json* v = get(key, "a number", required)) {
      if (!v->is_number()) type_error(key, "a number", *v);
      out = v->get<double>();
    }
  }
  void read(const char* key, bool& out, bool required = true) const {
    if (const json* v = get(key, "a boolean", required)) {
      if (!v->is_boolean()) type_error(key, "a boolean", *v);
      out = v->get<bool>();
    }
  }
  void read(const char* key, std::string& out, bool required = true) const {
    if (const json* v = get(key, "a string", required)) {
      if (!v->is_string()) type_error(key, "a string", *v);
      out = v->get<std::string>();
    }
  }
  template <class T>
  void read_list(const char* key, std::vector<T>& out, const char* expected, bool required = true) const {
    if (const json* v = get(key, expected, required)) {
      if (!v->is_array()) type_error(key, expected, *v);
      std::vector<T> values;
      for (const auto& e : *v) {
        bool ok = false;
        if constexpr (std::is_same_v<T, std::string>) ok = e.is_string();
        else ok = e.is_number_integer() &&
                  (!e.is_number_unsigned() || e.get<uint64_t>() <= uint64_t(INT32_MAX));
        if (!ok) type_error(key, expected, *v);
        values.push_back(e.get<T>());
      }
      out = std::move(values);
    }
  }

 private:
  const json& j_;
  std::string prefix_;
};

// Throws "config key <key>: <parts>" unless cond.
template <class... Parts>
void require(bool cond, const char* key, const Parts&... parts) {
  DSV4_CHECK(cond, "config key ", key, ": ", parts...);
}

void require_positive(const char* key, double value) {
  require(value > 0, key, "must be positive, got ", value);
}

bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

int ModelConfig::compress_ratio(int layer) const {
  DSV4_CHECK(layer >= 0 && static_cast<size_t>(layer) < compress_ratios.size(), "layer ", layer,
             " out of range: compress_ratios has ", compress_ratios.size(), " entries");
  return compress_ratios[static_cast<size_t>(layer)];
}

bool ModelConfig::is_hash_layer(int layer) const {
  return layer >= 0 && layer < num_hidden_layers && layer < num_hash_layers;
}

ModelConfig ModelConfig::from_json(const json& j) {
  DSV4_CHECK(j.is_object(), "config must be a JSON object, got ", j.type_name());
  ModelConfig c;
  const KeyReader r(j, "");
  r.read_list("architectures", c.architectures, "a list of strings", /*required=*/false);
  DSV4_CHECK(!c.architectures.empty() && c.architectures[0] == "DeepseekV4ForCausalLM",
             "unsupported architecture ",
             c.architectures.empty() ? std::string("(none)") : c.architectures[0],
             " (key architectures); dsv4 supports DeepseekV4ForCausalLM");
  r.read("model_type", c.model_type, /*required=*/false);
  DSV4_CHECK(c.model_type == "deepseek_v4", "unsupported architecture: model_type ",
             c.model_type, " (key model_type); dsv4 supports deepseek_v4");

  r.read("vocab_size", c.vocab_size);
  r.read("hidden_size", c.hidden_size);
  r.read("num_hidden_layers", c.num_hidden_layers);
  r.read("num_attention_heads", c.num_attention_heads);
  r.read("num_key_value_heads", c.num_key_value_heads);
  r.read("head_dim", c.head_dim);
  r.read("qk_rope_head_dim", c.qk_rope_head_dim);
  r.read("q_lora_rank", c.q_lora_rank);
  r.read("o_groups", c.o_groups);
  r.read("o_lora_rank", c.o_lora_rank);
  r.read("sliding_window", c.sliding_window);
  r.read_list("compress_ratios", c.compress_ratios, "a list of integers");
  r.read("compress_rope_theta", c.compress_rope_theta);
  r.read("rope_theta", c.rope_theta);
  if (const json* rs = r.get("rope_scaling", "an object", /*required=*/false)) {
    if (!rs->is_object()) r.type_error("rope_scaling", "an object", *rs);
    const KeyReader s(*rs, "rope_scaling.");
    RopeScaling scaling;
    if (rs->contains("type")) s.read("type", scaling.type);
    else s.read("rope_type", scaling.type);
    s.read("factor", scaling.factor);
    s.read("original_max_position_embeddings", scaling.original_max_position_embeddings);
    s.read("beta_fast", scaling.beta_fast, /*required=*/false);
    s.read("beta_slow", scaling.beta_slow, /*required=*/false);
    c.rope_scaling = scaling;
  }
  r.read("max_position_embeddings", c.max_position_embeddings);
  r.read("index_n_heads", c.index_n_heads);
  r.read("index_head_dim", c.index_head_dim);
  r.read("index_topk", c.index_topk);
  r.read("n_routed_experts", c.n_routed_experts);
  r.read("num_experts_per_tok", c.num_experts_per_tok);
  r.read("n_shared_experts", c.n_shared_experts);
  r.read("moe_intermediate_size", c.moe_intermediate_size);
  r.read("scoring_func", c.scoring_func);
  r.read("topk_method", c.topk_method, /*required=*/false);
  r.read("norm_topk_prob", c.norm_topk_prob, /*required=*/false);
  r.read("routed_scaling_factor", c.routed_scaling_factor);
  r.read("num_hash_layers", c.num_hash_layers);
  r.read("swiglu_limit", c.swiglu_limit);
  r.read("hidden_act", c.hidden_act, /*required=*/false);
  r.read("hc_mult", c.hc_mult);
  r.read("hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  r.read("hc_eps", c.hc_eps);
  r.read("rms_norm_eps", c.rms_norm_eps);
  r.read("num_nextn_predict_layers", c.num_nextn_predict_layers);
  r.read("expert_dtype", c.expert_dtype);
  if (const json* q = r.get("quantization_config", "an object", /*required=*/false)) {
    if (!q->is_object()) r.type_error("quantization_config", "an object", *q);
    const KeyReader s(*q, "quantization_config.");
    s.read("quant_method", c.quantization_config.quant_method);
    s.read("fmt", c.quantization_config.fmt, /*required=*/false);
    s.read("scale_fmt", c.quantization_config.scale_fmt, /*required=*/false);
    s.read("activation_scheme", c.quantization_config.activation_scheme, /*required=*/false);
    s.read_list("weight_block_size", c.quantization_config.weight_block_size,
                "a list of integers", /*required=*/false);
  }
  r.read("tie_word_embeddings", c.tie_word_embeddings, /*required=*/false);
  r.read("bos_token_id", c.bos_token_id, /*required=*/false);
  if (const json* eos = r.get("eos_token_id", "an integer or a list of integers", false);
      eos != nullptr && eos->is_array()) {
    std::vector<int> ids;
    r.read_list("eos_token_id", ids, "an integer or a list of integers");
    require(!ids.empty(), "eos_token_id", "the list is empty");
    c.eos_token_id = ids[0];
  } else {
    r.read("eos_token_id", c.eos_token_id, /*required=*/false);
  }
  r.read("torch_dtype", c.torch_dtype, /*required=*/false);
  c.validate();
  return c;
}

ModelConfig ModelConfig::from_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  DSV4_CHECK(in.good(), "cannot open model config ", path.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    DSV4_FAIL(path.string(), ": not valid JSON: ", e.what());
  }
  try {
    return from_json(j);
  } catch (const Error& e) {
    DSV4_FAIL(path.string(), ": ", e.what());
  }
}

void ModelConfig::validate() const {
  require_positive("vocab_size", static_cast<double>(vocab_size));
  require_positive("hidden_size", hidden_size);
  require_positive("num_hidden_layers", num_hidden_layers);
  require_positive("num_attention_heads", num_attention_heads);
  require_positive("head_dim", head_dim);
  require_positive("qk_rope_head_dim", qk_rope_head_dim);
  require_positive("q_lora_rank", q_lora_rank);
  require_positive("o_groups", o_groups);
  require_positive("o_lora_rank", o_lora_rank);
  require_positive("sliding_window", sliding_window);
  require_positive("compress_rope_theta", compress_rope_theta);
  require_positive("rope_theta", rope_theta);
  require_positive("max_position_embeddings", static_cast<double>(max_position_embeddings));
  require_positive("index_n_heads", index_n_heads);
  require_positive("index_head_dim", index_head_dim);
  require_positive("index_topk", index_topk);
  require_positive("n_routed_experts", n_routed_experts);
  require_positive("num_experts_per_tok", num_experts_per_tok);
  require_positive("moe_intermediate_size", moe_intermediate_size);
  require_positive("routed_scaling_factor", routed_scaling_factor);
  require_positive("swiglu_limit", swiglu_limit);
  require_positive("hc_sinkhorn_iters", hc_sinkhorn_iters);
  require_positive("hc_eps", hc_eps);
  require_positive("rms_norm_eps", rms_norm_eps);
  require(num_hash_layers >= 0, "num_hash_layers", "must be >= 0, got ", num_hash_layers);
  require(num_nextn_predict_layers >= 0, "num_nextn_predict_layers", "must be >= 0, got ",
          num_nextn_predict_layers);
  if (rope_scaling) {
    require_positive("rope_scaling.factor", rope_scaling->factor);
    require_positive("rope_scaling.original_max_position_embeddings",
                     static_cast<double>(rope_scaling->original_max_position_embeddings));
  }

  const size_t want = static_cast<size_t>(num_hidden_layers) + num_nextn_predict_layers;
  require(compress_ratios.size() == want, "compress_ratios", "has ", compress_ratios.size(),
          " entries, expected num_hidden_layers + num_nextn_predict_layers = ", want);
  for (size_t i = 0; i < compress_ratios.size(); ++i) {
    // 0 = sliding window only; r >= 2 = compressed KV (overlapping windows only when r == 4).
    require(compress_ratios[i] == 0 || compress_ratios[i] >= 2, "compress_ratios", "entry ", i,
            " is ", compress_ratios[i], ", expected 0 or a ratio >= 2");
  }

  require(hidden_size % 128 == 0, "hidden_size", hidden_size, " is not a multiple of 128");
  require(q_lora_rank % 128 == 0, "q_lora_rank", q_lora_rank, " is not a multiple of 128");
  require(static_cast<int64_t>(o_groups) * o_lora_rank % 128 == 0, "o_lora_rank",
          "o_groups * o_lora_rank = ", int64_t{o_groups} * o_lora_rank,
          " is not a multiple of 128");
  require(moe_intermediate_size % 128 == 0, "moe_intermediate_size", moe_intermediate_size,
          " is not a multiple of 128");
  require(num_attention_heads % o_groups == 0, "o_groups", "num_attention_heads ",
          num_attention_heads, " is not divisible by o_groups ", o_groups);
  require(int64_t{num_attention_heads} * head_dim / o_groups % 128 == 0, "o_groups",
          "num_attention_heads * head_dim / o_groups = ",
          int64_t{num_attention_heads} * head_dim / o_groups, " is not a multiple of 128");
  require(qk_rope_head_dim % 2 == 0, "qk_rope_head_dim", qk_rope_head_dim, " is odd");
  require(head_dim > qk_rope_head_dim && (head_dim - qk_rope_head_dim) % 64 == 0, "head_dim",
          "head_dim - qk_rope_head_dim = ", head_dim - qk_rope_head_dim,
          " must be a positive multiple of 64");
  require(is_pow2(index_head_dim), "index_head_dim", index_head_dim, " is not a power of two");
  require(index_head_dim >= qk_rope_head_dim, "index_head_dim", index_head_dim,
          " is smaller than qk_rope_head_dim ", qk_rope_head_dim);
  require(num_experts_per_tok <= n_routed_experts, "num_experts_per_tok", num_experts_per_tok,
          " exceeds n_routed_experts ", n_routed_experts);
  require(num_key_value_heads == 1, "num_key_value_heads", "must be 1 (single shared K=V head), got ",
          num_key_value_heads);
  require(n_shared_experts == 1, "n_shared_experts", "must be 1, got ", n_shared_experts);
  require(num_hash_layers <= num_hidden_layers, "num_hash_layers", num_hash_layers,
          " exceeds num_hidden_layers ", num_hidden_layers);
  require(hc_mult >= 1, "hc_mult", "must be >= 1, got ", hc_mult);
  require(scoring_func == "sqrtsoftplus" || scoring_func == "softmax" || scoring_func == "sigmoid",
          "scoring_func", "unsupported value \"", scoring_func,
          "\" (expected sqrtsoftplus, softmax or sigmoid)");
  require(expert_dtype == "fp4" || expert_dtype == "fp8", "expert_dtype", "unsupported value \"",
          expert_dtype, "\" (expected fp4 or fp8)");
  require(quantization_config.quant_method == "fp8", "quantization_config.quant_method",
          "unsupported value \"", quantization_config.quant_method, "\" (expected fp8)");
  require(quantization_config.weight_block_size == std::vector<int64_t>{128, 128},
          "quantization_config.weight_block_size", "must be [128, 128]");
  require(quantization_config.scale_fmt == "ue8m0", "quantization_config.scale_fmt",
          "unsupported value \"", quantization_config.scale_fmt, "\" (expected ue8m0)");
}

json ModelConfig::to_json() const {
  json j = {
      {"architectures", architectures},
      {"model_type", model_type},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"qk_rope_head_dim", qk_rope_head_dim},
      {"q_lora_rank", q_lora_rank},
      {"o_groups", o_groups},
      {"o_lora_rank", o_lora_rank},
      {"sliding_window", sliding_window},
      {"compress_ratios", compress_ratios},
      {"compress_rope_theta", compress_rope_theta},
      {"rope_theta", rope_theta},
      {"max_position_embeddings", max_position_embeddings},
      {"index_n_heads", index_n_heads},
      {"index_head_dim", index_head_dim},
      {"index_topk", index_topk},
      {"n_routed_experts", n_routed_experts},
      {"num_experts_per_tok", num_experts_per_tok},
      {"n_shared_experts", n_shared_experts},
      {"moe_intermediate_size", moe_intermediate_size},
      {"scoring_func", scoring_func},
      {"topk_method", topk_method},
      {"norm_topk_prob", norm_topk_prob},
      {"routed_scaling_factor", routed_scaling_factor},
      {"num_hash_layers", num_hash_layers},
      {"swiglu_limit", swiglu_limit},
      {"hidden_act", hidden_act},
      {"hc_mult", hc_mult},
      {"hc_sinkhorn_iters", hc_sinkhorn_iters},
      {"hc_eps", hc_eps},
      {"rms_norm_eps", rms_norm_eps},
      {"num_nextn_predict_layers", num_nextn_predict_layers},
      {"expert_dtype", expert_dtype},
      {"quantization_config",
       {{"quant_method", quantization_config.quant_method},
        {"fmt", quantization_config.fmt},
        {"scale_fmt", quantization_config.scale_fmt},
        {"activation_scheme", quantization_config.activation_scheme},
        {"weight_block_size", quantization_config.weight_block_size}}},
      {"tie_word_embeddings", tie_word_embeddings},
      {"bos_token_id", bos_token_id},
      {"eos_token_id", eos_token_id},
      {"torch_dtype", torch_dtype},
  };
  if (rope_scaling) {
    j["rope_scaling"] = {{"type", rope_scaling->type},
                         {"factor", rope_scaling->factor},
                         {"original_max_position_embeddings",
                          rope_scaling->original_max_position_embeddings},
                         {"beta_fast", rope_scaling->beta_fast},
                         {"beta_slow", rope_scaling->beta_slow}};
  }
  return j;
}

}  // namespace dsv4::model
