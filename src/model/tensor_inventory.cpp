#include "model/tensor_inventory.h"

#include <sstream>
#include <unordered_map>

#include "base/check.h"

namespace dsv4::model {
namespace {

using checkpoint::DType;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class InventoryBuilder {
 public:
  explicit InventoryBuilder(const ModelConfig& cfg) : cfg_(cfg) {}

  std::vector<ExpectedTensor> build() {
    const int64_t d = cfg_.hidden_size;
    add("embed.weight", DType::kBF16, {cfg_.vocab_size, d});
    add("head.weight", DType::kBF16, {cfg_.vocab_size, d});
    add("norm.weight", DType::kBF16, {d});
    hc_head("");
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) block("layers." + std::to_string(l) + ".", l);
    for (int i = 0; i < cfg_.num_nextn_predict_layers; ++i) {
      const std::string p = "mtp." + std::to_string(i) + ".";
      block(p, cfg_.num_hidden_layers + i);
      fp8(p + "e_proj", d, d);
      fp8(p + "h_proj", d, d);
      add(p + "enorm.weight", DType::kBF16, {d});
      add(p + "hnorm.weight", DType::kBF16, {d});
      add(p + "norm.weight", DType::kBF16, {d});
      hc_head(p);
    }
    return std::move(out_);
  }

 private:
  void add(std::string name, DType dtype, std::vector<int64_t> shape) {
    out_.push_back({std::move(name), dtype, std::move(shape)});
  }
  void fp8(const std::string& w, int64_t o, int64_t i) {
    add(w + ".weight", DType::kF8_E4M3, {o, i});
    add(w + ".scale", DType::kF8_E8M0, {ceil_div(o, 128), ceil_div(i, 128)});
  }
  void fp4(const std::string& w, int64_t o, int64_t i) {
    add(w + ".weight", DType::kI8, {o, i / 2});
    add(w + ".scale", DType::kF8_E8M0, {o, i / 32});
  }
  void expert(const std::string& w, int64_t o, int64_t i) {
    if (cfg_.expert_dtype == "fp4") fp4(w, o, i);
    else fp8(w, o, i);
  }
  void hc_head(const std::string& p) {
    const int64_t hc = cfg_.hc_mult;
    add(p + "hc_head_fn", DType::kF32, {hc, hc * cfg_.hidden_size});
    add(p + "hc_head_base", DType::kF32, {hc});
    add(p + "hc_head_scale", DType::kF32, {1});
  }
  // Compressor over the hidden states producing entries of `dim`; overlap (c = 2) iff r == 4.
  void compressor(const std::string& p, int ratio, int64_t dim) {
    const int64_t c = ratio == 4 ? 2 : 1, d = cfg_.hidden_size;
    add(p + "wkv.weight", DType::kBF16, {c * dim, d});
    add(p + "wgate.weight", DType::kBF16, {c * dim, d});
    add(p + "ape", DType::kF32, {ratio, c * dim});
    add(p + "norm.weight", DType::kBF16, {dim});
  }

  // One decoder block (trunk layer or MTP block) with layer id `layer`.
  void block(const std::string& p, int layer) {
    const int64_t d = cfg_.hidden_size, hc = cfg_.hc_mult, h = cfg_.num_attention_heads;
    const int64_t hd = cfg_.head_dim, g = cfg_.o_groups, ro = cfg_.o_lora_rank;
    const int64_t e = cfg_.n_routed_experts, inter = cfg_.moe_intermediate_size;
    const int ratio = cfg_.compress_ratio(layer);
    add(p + "attn_norm.weight", DType::kBF16, {d});
    add(p + "ffn_norm.weight", DType::kBF16, {d});
    for (const char* which : {"attn", "ffn"}) {
      const std::string hp = p + "hc_" + which + "_";
      add(hp + "fn", DType::kF32, {(2 + hc) * hc, hc * d});
      add(hp + "base", DType::kF32, {(2 + hc) * hc});
      add(hp + "scale", DType::kF32, {3});
    }
    const std::string a = p + "attn.";
    add(a + "attn_sink", DType::kF32, {h});
    fp8(a + "wq_a", cfg_.q_lora_rank, d);
    add(a + "q_norm.weight", DType::kBF16, {cfg_.q_lora_rank});
    fp8(a + "wq_b", h * hd, cfg_.q_lora_rank);
    fp8(a + "wkv", hd, d);
    add(a + "kv_norm.weight", DType::kBF16, {hd});
    fp8(a + "wo_a", g * ro, h * hd / g);  // viewed as [G, r_o, H*hd/G]
    fp8(a + "wo_b", d, g * ro);
    if (ratio > 0) compressor(a + "compressor.", ratio, hd);
    if (ratio == 4) {
      const int64_t ih = cfg_.index_n_heads, ihd = cfg_.index_head_dim;
      fp8(a + "indexer.wq_b", ih * ihd, cfg_.q_lora_rank);
      add(a + "indexer.weights_proj.weight", DType::kBF16, {ih, d});
      compressor(a + "indexer.compressor.", ratio, ihd);
    }
    const std::string f = p + "ffn.";
    add(f + "gate.weight", DType::kBF16, {e, d});
    if (cfg_.is_hash_layer(layer)) {
      add(f + "gate.tid2eid", DType::kI64, {cfg_.vocab_size, cfg_.num_experts_per_tok});
    } else {
      add(f + "gate.bias", DType::kF32, {e});
    }
    for (int64_t x = 0; x < e; ++x) {
      const std::string ex = f + "experts." + std::to_string(x) + ".";
      expert(ex + "w1", inter, d);
      expert(ex + "w2", d, inter);
      expert(ex + "w3", inter, d);
    }
    fp8(f + "shared_experts.w1", inter, d);
    fp8(f + "shared_experts.w2", d, inter);
    fp8(f + "shared_experts.w3", inter, d);
  }

  const ModelConfig& cfg_;
  std::vector<ExpectedTensor> out_;
};

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& cfg) {
  return InventoryBuilder(cfg).build();
}

uint64_t expected_bytes(const std::vector<ExpectedTensor>& tensors) {
  uint64_t total = 0;
  for (const auto& t : tensors) {
    uint64_t n = checkpoint::dtype_size(t.dtype);
    for (int64_t s : t.shape) n *= static_cast<uint64_t>(s);
    total += n;
  }
  return total;
}

void verify_checkpoint(const checkpoint::Checkpoint& ckpt, const ModelConfig& cfg) {
  constexpr size_t kMaxListed = 20;
  const std::vector<ExpectedTensor> expected = expected_tensors(cfg);
  std::vector<std::string> problems;
  std::unordered_map<std::string_view, bool> known;
  known.reserve(expected.size());
  const std::string where = ckpt.path().string();
  for (const auto& e : expected) {
    known.emplace(e.name, true);
    const checkpoint::TensorView* t = ckpt.find(e.name);
    if (t == nullptr) {
      problems.push_back(str_cat(where, ": missing tensor \"", e.name, "\" (expected ",
                                 checkpoint::dtype_name(e.dtype), " ",
                                 checkpoint::shape_to_string(e.shape), ")"));
      continue;
    }
    const bool dtype_ok = t->dtype == e.dtype ||
                          (e.dtype == DType::kI64 && t->dtype == DType::kI32 &&
                           e.name.ends_with(".tid2eid"));
    if (!dtype_ok) {
      problems.push_back(str_cat(t->file, ": tensor \"", e.name, "\" has dtype ",
                                 checkpoint::dtype_name(t->dtype), ", expected ",
                                 checkpoint::dtype_name(e.dtype)));
    }
    if (t->shape != e.shape) {
      problems.push_back(str_cat(t->file, ": tensor \"", e.name, "\" has shape ",
                                 t->shape_string(), ", expected ",
                                 checkpoint::shape_to_string(e.shape)));
    }
  }
  for (const std::string& name : ckpt.names()) {
    if (known.count(name) == 0) {
      problems.push_back(str_cat(ckpt.at(name).file, ": unexpected tensor \"", name,
                                 "\" (not in the DeepSeek-V4 inventory for this config)"));
    }
  }
  if (problems.empty()) return;
  std::ostringstream msg;
  msg << "checkpoint " << where << " does not match its config (" << problems.size()
      << " problem" << (problems.size() == 1 ? "" : "s") << "):";
  for (size_t i = 0; i < problems.size() && i < kMaxListed; ++i) msg << "\n  " << problems[i];
  if (problems.size() > kMaxListed) msg << "\n  and " << problems.size() - kMaxListed << " more";
  DSV4_FAIL(msg.str());
}

}  // namespace dsv4::model
