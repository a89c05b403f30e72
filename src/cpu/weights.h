// DeepSeek-V4 weights decoded for the CPU reference backend (spec §3.2 names).
//
// Loading converts every tensor to the fp32 form the reference computes with: FP8/FP4 codes
// decoded (scales kept per block), bf16 norms/compressor/router/head weights upcast, and
// wo_a dequantized to bf16 values per 128×128 tile (what convert.py does). Immutable after
// load; shared by every sequence (thread-safe to read).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "cpu/linear.h"
#include "model/model_config.h"

namespace dsv4::cpu {

struct CompressorWeights {
  int ratio = 0;          // r: 4 (overlap) or 128
  int head_dim = 0;       // h: 512 (attention) or 128 (indexer)
  bool overlap = false;   // r == 4
  Fp32Linear wkv, wgate;  // [c·h, D], c = 2 if overlap
  std::vector<float> ape;   // [r, c·h]
  std::vector<float> norm;  // [h]
};

struct IndexerWeights {
  Fp8Linear wq_b;             // [H_I·d_I, q_lora_rank]
  Bf16Linear weights_proj;    // [H_I, D]
  CompressorWeights compressor;
};

struct AttentionWeights {
  std::vector<float> attn_sink;  // [H]
  Fp8Linear wq_a, wq_b, wkv, wo_b;
  std::vector<float> q_norm, kv_norm;
  Bf16Linear wo_a;  // [G·r_o, H·d/G] dequantized to bf16 values
  std::optional<CompressorWeights> compressor;
  std::optional<IndexerWeights> indexer;
};

struct ExpertWeights {
  // Routed experts use Fp4Linear (expert_dtype fp4) or Fp8Linear (fp8); shared uses Fp8Linear.
  std::optional<Fp4Linear> w1_fp4, w2_fp4, w3_fp4;
  std::optional<Fp8Linear> w1_fp8, w2_fp8, w3_fp8;
};

struct MoeWeights {
  Fp32Linear gate;               // router [E, D], fp32
  std::vector<float> bias;       // [E] (score-routed layers), empty on hash layers
  std::vector<int32_t> tid2eid;  // [vocab, k] (hash layers), empty otherwise
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

struct HcWeights {
  Fp32Linear fn;            // [(2+n)·n or n, n·D]
  std::vector<float> base;  // [(2+n)·n] or [n]
  std::vector<float> scale; // [3] or [1]
};

struct BlockWeights {
  std::vector<float> attn_norm, ffn_norm;
  HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
};

struct MtpWeights {
  BlockWeights block;
  Fp8Linear e_proj, h_proj;
  std::vector<float> enorm, hnorm, norm;
  HcWeights hc_head;
};

struct ModelWeights {
  std::vector<float> embed;  // [vocab, D] bf16 values
  Fp32Linear head;           // [vocab, D]
  std::vector<float> norm;   // [D]
  HcWeights hc_head;
  std::vector<BlockWeights> layers;
  std::vector<MtpWeights> mtp;
};

// Decodes every tensor; the checkpoint must already have passed verify_checkpoint.
// Runs tensor conversions in parallel. Throws dsv4::Error naming the tensor on bad data.
std::unique_ptr<ModelWeights> load_weights(const checkpoint::Checkpoint& ckpt,
                                           const model::ModelConfig& config);

}  // namespace dsv4::cpu
