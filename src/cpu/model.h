// The DeepSeek-V4 forward pass on the CPU: the reference backend every other backend and
// kernel is checked against (spec §4). Exact reference rounding points; fp32 reductions in
// double where the reference's order is unspecified (correctly rounded once).
//
// Semantics: prefill from position 0 at any length, then any number of tokens per call
// (one per call reproduces the reference decode; several = chunked prefill / verification).
// Thread-safety: a CpuModel is immutable after construction and may serve many sequences;
// a SequenceState is used by one caller at a time. Internally uses base/parallel.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "cpu/attention.h"
#include "cpu/mhc.h"
#include "cpu/moe.h"
#include "cpu/sequence_state.h"
#include "cpu/weights.h"
#include "model/model_config.h"
#include "numerics/rope.h"

namespace dsv4::cpu {

struct ForwardOutput {
  std::vector<float> logits;          // [vocab] fp32, last position of the call
  std::vector<float> final_streams;   // [n, hc, D] output of the last trunk block (pre-HC_head)
  std::vector<float> layer_streams;   // [num_layers, hc, D] after each block, last position
                                      // (only when requested)
  std::vector<std::vector<int32_t>> routed_experts;  // [layer][k] last position (on request)
};

class CpuModel {
 public:
  CpuModel(model::ModelConfig config, std::unique_ptr<ModelWeights> weights);

  // Loads config.json + checkpoint from `dir`, verifying the tensor inventory.
  static std::unique_ptr<CpuModel> load(const std::filesystem::path& dir);
  // Parses, verifies and decodes an already opened checkpoint.
  static std::unique_ptr<CpuModel> from_checkpoint(const model::ModelConfig& config,
                                                   const checkpoint::Checkpoint& ckpt);

  const model::ModelConfig& config() const { return config_; }

  // Zeroed caches (compressor kv 0, score −inf) for the trunk and the MTP blocks, dense.
  SequenceState new_sequence() const;
  // Shape of the state of layer `layer` (trunk layers, then MTP blocks).
  LayerStateShape layer_state_shape(int layer) const;

  // Trunk forward over `tokens` at positions [state.length, state.length + n).
  // prompt_length: when this call is one chunk of a prefill, the whole prompt's length
  // (keeps the one-shot candidate layout, so any chunk split gives identical logits);
  // 0 = the call stands alone (reference semantics: prefill at 0, or decode).
  ForwardOutput forward(SequenceState& state, std::span<const int32_t> tokens,
                        bool want_layer_streams = false, int64_t prompt_length = 0) const;

  // MTP block 0 over the positions of the last trunk call: streams = that call's
  // final_streams [n, hc, D], next_ids[t] = the token following position start+t.
  // Returns the logits of the last position. Keeps the MTP window cache in `state`.
  std::vector<float> mtp_forward(SequenceState& state, std::span<const float> streams,
                                 std::span<const int32_t> next_ids, int64_t start_pos,
                                 std::vector<int32_t>* routed_experts = nullptr) const;

 private:
  void block_forward(const BlockWeights& w, int layer, LayerState& cache,
                     std::span<const int32_t> ids, int64_t start_pos, int64_t n,
                     int64_t window_len, std::vector<float>& streams,
                     std::vector<int32_t>* routed_last) const;
  std::vector<float> head_logits(std::span<const float> streams_last, const HcWeights& hc_head,
                                 std::span<const float> norm) const;

  model::ModelConfig config_;
  std::unique_ptr<ModelWeights> weights_;
  numerics::RopeTable rope_window_;    // ratio-0 layers: rope_theta, no YaRN
  numerics::RopeTable rope_compress_;  // ratio>0 layers: compress_rope_theta + YaRN
  HcParams hc_params_;
};

}  // namespace dsv4::cpu
