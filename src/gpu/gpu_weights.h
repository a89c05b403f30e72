// DeepSeek-V4 weights on the device, in checkpoint formats (spec §3.2, §3.3).
//
// FP8 linears keep e4m3 codes + e8m0 scale bytes, FP4 experts keep packed nibbles + e8m0
// bytes, dense weights keep their checkpoint dtype (bf16 or f32; the kernels widen them), and
// wo_a, which the reference's converter dequantizes to bf16 per 128×128 tile, keeps its e4m3
// codes + scales and is widened in registers (dense_linear_fp8, same bits), or is widened at load
// where that kernel does not take its shape (or DSV4_WO_A=bf16). Small
// vectors (norms, biases, ape, sinks, hc base/scale) are fp32. Routed experts of a layer are
// contiguous ([E, out, ...]) so that one launch can serve every (token, expert) pair.
// Built from a verified checkpoint or as random "dummy" weights directly on the device.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "gpu/cuda_check.h"
#include "model/model_config.h"

namespace dsv4::gpu {

struct Lin8W {
  DeviceBuffer<uint8_t> w, s;  // [out, in] e4m3, [ceil(out/128), ceil(in/128)] e8m0
  int64_t out = 0, in = 0;
};
struct DenseW {
  DeviceBuffer<uint8_t> w;  // [out, in] bf16 or f32; e4m3 codes when fp8()
  // wo_a only: E8M0 tile scales [ceil(out/128), in/128] when w holds e4m3 codes, each weight then
  // being bf16(code·scale) (bf16 is true; run it with dense_linear_fp8). Empty otherwise.
  DeviceBuffer<uint8_t> s;
  bool bf16 = true;
  int64_t out = 0, in = 0;
  bool fp8() const { return s.size() > 0; }
  size_t bytes() const { return w.bytes() + s.bytes(); }
};
struct CompressorW {
  int ratio = 0, head_dim = 0;
  bool overlap = false;
  DenseW wkv, wgate;            // [c·h, D]
  DeviceBuffer<float> ape, norm;  // [r, c·h], [h]
};
struct IndexerW {
  Lin8W wq_b;
  DenseW weights_proj;  // [H_I, D]
  CompressorW compressor;
};
struct AttentionW {
  DeviceBuffer<float> sink, q_norm, kv_norm;
  Lin8W wq_a, wq_b, wkv, wo_b;
  DenseW wo_a;  // [G·r_o, H·d/G]: e4m3 + scales (fp8()) or widened bf16
  std::optional<CompressorW> compressor;
  std::optional<IndexerW> indexer;
};
struct ExpertsW {
  bool fp4 = true;
  int num = 0;
  int64_t inter = 0, dim = 0;
  DeviceBuffer<uint8_t> w1, w2, w3, s1, s2, s3;  // contiguous over experts
};
struct MoeW {
  DenseW gate;                    // [E, D]
  DeviceBuffer<float> bias;       // [E] (score routing)
  DeviceBuffer<int32_t> tid2eid;  // [vocab, k] (hash routing)
  ExpertsW experts;
  Lin8W sw1, sw2, sw3;  // shared expert
  // true: experts' w1/w3/w2 (+ FP4 row scales) and sw1/sw3/sw2 hold the grouped MoE kernels'
  // stage-tile layout (moe_grouped.h), not the checkpoint's: set at load exactly where GpuModel
  // takes the grouped path (FP4 experts, moe_grouped_supports, DSV4_GPU_MOE != reference).
  bool grouped_layout = false;
};
struct HcW {
  DenseW fn;
  DeviceBuffer<float> base, scale;
};
struct BlockW {
  DeviceBuffer<float> attn_norm, ffn_norm;
  HcW hc_attn, hc_ffn;
  AttentionW attn;
  MoeW ffn;
};
struct MtpW {
  BlockW block;
  Lin8W e_proj, h_proj;
  DeviceBuffer<float> enorm, hnorm, norm;
  HcW hc_head;
};
struct GpuWeights {
  DeviceBuffer<uint16_t> embed;  // [vocab, D] bf16
  DenseW head;                   // [vocab, D]
  DeviceBuffer<float> norm;
  HcW hc_head;
  std::vector<BlockW> layers;
  std::vector<MtpW> mtp;
  size_t total_bytes = 0;
};

// Uploads a checkpoint that already passed model::verify_checkpoint, onto the current device.
// Tensor parallelism (tp_size > 1): rank tp_rank keeps heads [r·H/tp, (r+1)·H/tp) of wq_b
// and attn_sink, output groups [r·G/tp, ...) of wo_a, the matching input columns of wo_b,
// and intermediate rows [r·I/tp, ...) of every routed and shared expert's w1/w3 with the
// matching columns of w2; everything else is replicated. A split must keep the scale blocks
// whole (128 for FP8, 32 for FP4 inputs); the error names the tensor otherwise.
std::unique_ptr<GpuWeights> upload_weights(const checkpoint::Checkpoint& ckpt,
                                           const model::ModelConfig& config, int tp_rank = 0,
                                           int tp_size = 1);
// Random weights of the right shapes and formats (this rank's part), generated on the
// current device (seeded): replicated tensors are the same on every rank (the ranks route,
// index and mix alike, as with a checkpoint), split tensors differ per rank.
std::unique_ptr<GpuWeights> dummy_weights(const model::ModelConfig& config, uint64_t seed,
                                          int tp_rank = 0, int tp_size = 1);

}  // namespace dsv4::gpu
