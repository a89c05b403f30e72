#include "cpu/weights.h"

#include <cstring>
#include <string>

#include "base/check.h"
#include "base/parallel.h"
#include "numerics/formats.h"

namespace dsv4::cpu {
namespace {

using checkpoint::Checkpoint;
using checkpoint::DType;
using checkpoint::TensorView;
namespace nm = numerics;

// Checkpoint data may be unaligned: every multi-byte element is read with memcpy.
template <class T>
T load_element(const std::byte* base, size_t i) {
  T v;
  std::memcpy(&v, base + i * sizeof(T), sizeof(T));
  return v;
}

std::vector<float> to_floats(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  switch (t.dtype) {
    case DType::kBF16: {
      for (size_t i = 0; i < out.size(); ++i)
        out[i] = nm::bf16_bits_to_float(load_element<uint16_t>(t.data, i));
      break;
    }
    case DType::kF32: {
      for (size_t i = 0; i < out.size(); ++i) out[i] = load_element<float>(t.data, i);
      break;
    }
    case DType::kF8_E8M0: {
      const auto* p = reinterpret_cast<const uint8_t*>(t.data);
      for (size_t i = 0; i < out.size(); ++i) out[i] = nm::e8m0_to_float(p[i]);
      break;
    }
    default:
      DSV4_FAIL("tensor ", t.name, " in ", t.file, ": dtype ", checkpoint::dtype_name(t.dtype),
                " cannot be read as floats here");
  }
  return out;
}

std::vector<float> floats(const Checkpoint& c, const std::string& name) { return to_floats(c.at(name)); }

Fp8Linear load_fp8(const Checkpoint& c, const std::string& prefix) {
  const TensorView& w = c.at(prefix + ".weight");
  DSV4_CHECK(w.dtype == DType::kF8_E4M3 && w.shape.size() == 2, "tensor ", w.name,
             " must be a 2-D F8_E4M3 matrix");
  Fp8Linear lin;
  lin.out = w.shape[0];
  lin.in = w.shape[1];
  lin.weight.resize(static_cast<size_t>(w.numel()));
  const auto* p = reinterpret_cast<const uint8_t*>(w.data);
  for (size_t i = 0; i < lin.weight.size(); ++i) lin.weight[i] = nm::e4m3_to_float(p[i]);
  lin.scale = floats(c, prefix + ".scale");
  DSV4_CHECK(static_cast<int64_t>(lin.scale.size()) == ((lin.out + 127) / 128) * ((lin.in + 127) / 128),
             "tensor ", prefix, ".scale has ", lin.scale.size(), " entries for a ", lin.out, "x",
             lin.in, " FP8 weight");
  return lin;
}

Fp4Linear load_fp4(const Checkpoint& c, const std::string& prefix) {
  const TensorView& w = c.at(prefix + ".weight");
  DSV4_CHECK((w.dtype == DType::kI8 || w.dtype == DType::kU8) && w.shape.size() == 2, "tensor ",
             w.name, " must be a 2-D I8 matrix of packed FP4 pairs");
  Fp4Linear lin;
  lin.out = w.shape[0];
  lin.in = w.shape[1] * 2;
  lin.weight.resize(static_cast<size_t>(lin.out * lin.in));
  const auto* p = reinterpret_cast<const uint8_t*>(w.data);
  for (int64_t o = 0; o < lin.out; ++o) {
    const uint8_t* row = p + o * (lin.in / 2);
    for (int64_t k = 0; k < lin.in; ++k) lin.weight[o * lin.in + k] = nm::e2m1_to_float(nm::fp4_nibble(row, k));
  }
  lin.scale = floats(c, prefix + ".scale");
  DSV4_CHECK(static_cast<int64_t>(lin.scale.size()) == lin.out * (lin.in / 32), "tensor ", prefix,
             ".scale does not match the FP4 weight");
  return lin;
}

// wo_a as convert.py produces it: bf16(fp8 · tile scale).
Bf16Linear load_fp8_as_bf16(const Checkpoint& c, const std::string& prefix) {
  Fp8Linear f = load_fp8(c, prefix);
  Bf16Linear lin;
  lin.out = f.out;
  lin.in = f.in;
  lin.weight.resize(f.weight.size());
  const int64_t cols = (f.in + 127) / 128;
  for (int64_t o = 0; o < f.out; ++o)
    for (int64_t i = 0; i < f.in; ++i)
      lin.weight[o * f.in + i] = nm::round_bf16(f.weight[o * f.in + i] * f.scale[(o / 128) * cols + i / 128]);
  return lin;
}

Bf16Linear load_bf16_linear(const Checkpoint& c, const std::string& name) {
  const TensorView& w = c.at(name);
  return Bf16Linear{.out = w.shape[0], .in = w.shape[1], .weight = to_floats(w)};
}

Fp32Linear load_fp32_linear(const Checkpoint& c, const std::string& name) {
  const TensorView& w = c.at(name);
  DSV4_CHECK(w.shape.size() == 2, "tensor ", name, " must be 2-D");
  return Fp32Linear{.out = w.shape[0], .in = w.shape[1], .weight = to_floats(w)};
}

HcWeights load_hc(const Checkpoint& c, const std::string& prefix) {
  return HcWeights{.fn = load_fp32_linear(c, prefix + "_fn"),
                   .base = floats(c, prefix + "_base"),
                   .scale = floats(c, prefix + "_scale")};
}

CompressorWeights load_compressor(const Checkpoint& c, const std::string& prefix, int ratio,
                                  int head_dim) {
  CompressorWeights w;
  w.ratio = ratio;
  w.head_dim = head_dim;
  w.overlap = ratio == 4;
  w.wkv = load_fp32_linear(c, prefix + ".wkv.weight");
  w.wgate = load_fp32_linear(c, prefix + ".wgate.weight");
  w.ape = floats(c, prefix + ".ape");
  w.norm = floats(c, prefix + ".norm.weight");
  return w;
}

ExpertWeights load_expert(const Checkpoint& c, const std::string& prefix, bool fp4) {
  ExpertWeights e;
  if (fp4) {
    e.w1_fp4 = load_fp4(c, prefix + ".w1");
    e.w2_fp4 = load_fp4(c, prefix + ".w2");
    e.w3_fp4 = load_fp4(c, prefix + ".w3");
  } else {
    e.w1_fp8 = load_fp8(c, prefix + ".w1");
    e.w2_fp8 = load_fp8(c, prefix + ".w2");
    e.w3_fp8 = load_fp8(c, prefix + ".w3");
  }
  return e;
}

BlockWeights load_block(const Checkpoint& c, const model::ModelConfig& cfg, const std::string& p,
                        int layer) {
  BlockWeights b;
  b.attn_norm = floats(c, p + ".attn_norm.weight");
  b.ffn_norm = floats(c, p + ".ffn_norm.weight");
  b.hc_attn = load_hc(c, p + ".hc_attn");
  b.hc_ffn = load_hc(c, p + ".hc_ffn");
  AttentionWeights& a = b.attn;
  a.attn_sink = floats(c, p + ".attn.attn_sink");
  a.wq_a = load_fp8(c, p + ".attn.wq_a");
  a.q_norm = floats(c, p + ".attn.q_norm.weight");
  a.wq_b = load_fp8(c, p + ".attn.wq_b");
  a.wkv = load_fp8(c, p + ".attn.wkv");
  a.kv_norm = floats(c, p + ".attn.kv_norm.weight");
  a.wo_a = load_fp8_as_bf16(c, p + ".attn.wo_a");
  a.wo_b = load_fp8(c, p + ".attn.wo_b");
  const int ratio = cfg.compress_ratio(layer);
  if (ratio > 0) {
    a.compressor = load_compressor(c, p + ".attn.compressor", ratio, static_cast<int>(cfg.head_dim));
    if (ratio == 4) {
      IndexerWeights ix;
      ix.wq_b = load_fp8(c, p + ".attn.indexer.wq_b");
      ix.weights_proj = load_bf16_linear(c, p + ".attn.indexer.weights_proj.weight");
      ix.compressor = load_compressor(c, p + ".attn.indexer.compressor", ratio,
                                      static_cast<int>(cfg.index_head_dim));
      a.indexer = std::move(ix);
    }
  }
  MoeWeights& m = b.ffn;
  m.gate = load_fp32_linear(c, p + ".ffn.gate.weight");
  if (cfg.is_hash_layer(layer)) {
    const TensorView& t = c.at(p + ".ffn.gate.tid2eid");
    m.tid2eid.resize(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < m.tid2eid.size(); ++i) {
      const int64_t v = t.dtype == DType::kI64 ? load_element<int64_t>(t.data, i)
                                               : load_element<int32_t>(t.data, i);
      DSV4_CHECK(v >= 0 && v < cfg.n_routed_experts, "tensor ", t.name, " in ", t.file,
                 ": expert id ", v, " at index ", i, " is outside [0, ", cfg.n_routed_experts, ")");
      m.tid2eid[i] = static_cast<int32_t>(v);
    }
  } else {
    m.bias = floats(c, p + ".ffn.gate.bias");
  }
  const bool fp4 = cfg.expert_dtype == "fp4";
  m.experts.resize(static_cast<size_t>(cfg.n_routed_experts));
  parallel_for(cfg.n_routed_experts, [&](int64_t b0, int64_t e0) {
    for (int64_t e = b0; e < e0; ++e)
      m.experts[e] = load_expert(c, p + ".ffn.experts." + std::to_string(e), fp4);
  });
  m.shared = load_expert(c, p + ".ffn.shared_experts", /*fp4=*/false);
  return b;
}

}  // namespace

std::unique_ptr<ModelWeights> load_weights(const Checkpoint& c, const model::ModelConfig& cfg) {
  auto w = std::make_unique<ModelWeights>();
  w->embed = floats(c, "embed.weight");
  w->head = load_fp32_linear(c, "head.weight");
  w->norm = floats(c, "norm.weight");
  w->hc_head = load_hc(c, "hc_head");
  for (int l = 0; l < cfg.num_layers(); ++l)
    w->layers.push_back(load_block(c, cfg, "layers." + std::to_string(l), l));
  for (int i = 0; i < cfg.num_nextn_predict_layers; ++i) {
    const std::string p = "mtp." + std::to_string(i);
    MtpWeights m;
    m.block = load_block(c, cfg, p, cfg.num_layers() + i);
    m.e_proj = load_fp8(c, p + ".e_proj");
    m.h_proj = load_fp8(c, p + ".h_proj");
    m.enorm = floats(c, p + ".enorm.weight");
    m.hnorm = floats(c, p + ".hnorm.weight");
    m.norm = floats(c, p + ".norm.weight");
    m.hc_head = load_hc(c, p + ".hc_head");
    w->mtp.push_back(std::move(m));
  }
  return w;
}

}  // namespace dsv4::cpu
