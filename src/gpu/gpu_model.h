// The DeepSeek-V4 forward pass on one CUDA device, with the API shape of cpu::CpuModel.
//
// Semantics are the CPU reference's (spec §4): prefill from 0 at any length, then any
// number of tokens per call; prompt_length keeps chunked prefill in the one-shot candidate
// layout. Per-sequence state (window ring, compressed KV, indexer keys, compressor states)
// lives on the device in GpuSequenceState, sized for opts.max_seq_len positions.
// Thread-safety: a GpuModel owns scratch buffers and one CUDA stream (the legacy default
// stream); use it from one thread at a time. Every call returns after the device finished.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_weights.h"
#include "gpu/moe_grouped.h"
#include "model/model_config.h"

namespace dsv4::gpu {

struct GpuModelOptions {
  int64_t max_seq_len = 0;  // 0 = min(max_position_embeddings, 65536)
  // Tensor parallelism: this model is shard tp_rank of tp_size (heads, output groups and the
  // expert/shared-expert intermediate dims split; everything else replicated).
  int tp_rank = 0;
  int tp_size = 1;
};

// One layer's state. Owning buffers from new_sequence(), or non-owning views into a
// GpuStatePool slot (state_pool.h); the kernels only use get() / size() / bytes().
struct GpuLayerCache {
  DeviceBuffer<float> window;      // [sliding_window, head_dim]
  DeviceBuffer<float> compressed;  // [max_seq_len / ratio, head_dim]
  DeviceBuffer<float> index_keys;  // [max_seq_len / ratio, index_head_dim]
  DeviceBuffer<float> comp_kv, comp_score;    // [slots, width]
  DeviceBuffer<float> index_kv, index_score;  // [slots, width]
};

struct GpuSequenceState {
  std::vector<GpuLayerCache> layers;  // trunk layers, then MTP blocks
  int64_t length = 0;
  int64_t mtp_length = 0;
  int32_t slot = -1;  // GpuStatePool slot of the views; -1: owning (new_sequence())
};

struct GpuForwardOutput {
  std::vector<float> logits;         // [vocab] fp32, last position
  std::vector<float> final_streams;  // [n, hc, D] (empty when not requested)
  std::vector<float> layer_streams;  // [num_layers, hc, D] last position (on request)
};

class GpuModel {
 public:
  GpuModel(model::ModelConfig config, std::unique_ptr<GpuWeights> weights, GpuModelOptions opts = {});
  ~GpuModel();
  static std::unique_ptr<GpuModel> load(const std::filesystem::path& dir, GpuModelOptions opts = {});
  static std::unique_ptr<GpuModel> from_checkpoint(const model::ModelConfig& config,
                                                   const checkpoint::Checkpoint& ckpt,
                                                   GpuModelOptions opts = {});
  // Random weights generated on the device (--load-format dummy).
  static std::unique_ptr<GpuModel> dummy(const model::ModelConfig& config, uint64_t seed,
                                         GpuModelOptions opts = {});

  const model::ModelConfig& config() const { return config_; }
  const GpuWeights& weights() const { return *weights_; }
  int64_t max_seq_len() const { return max_len_; }
  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }
  // Sizes of this shard: query heads, wo_a output groups, expert intermediate width.
  int64_t local_heads() const { return config_.num_attention_heads / tp_size_; }
  int64_t local_groups() const { return config_.o_groups / tp_size_; }
  int64_t local_inter() const { return config_.moe_intermediate_size / tp_size_; }

  // A fresh state in its own allocations (tools, tests); servers take states from a
  // GpuStatePool instead (one allocation, slots reused). Same sizes and reset either way.
  GpuSequenceState new_sequence() const;

  GpuForwardOutput forward(GpuSequenceState& state, std::span<const int32_t> tokens,
                           bool want_layer_streams = false, int64_t prompt_length = 0,
                           bool want_final_streams = true);

  // MTP block 0 over the positions of the last trunk call (streams [n, hc, D] from it).
  std::vector<float> mtp_forward(GpuSequenceState& state, std::span<const float> streams,
                                 std::span<const int32_t> next_ids, int64_t start_pos);

 private:
  struct Workspace;
  void block_forward(const BlockW& w, int layer, GpuLayerCache& cache, const int32_t* ids,
                     int64_t start_pos, int64_t n, int64_t window_len, float* streams);
  void attention(const AttentionW& w, int ratio, GpuLayerCache& cache, const float* x, int64_t n,
                 int64_t start_pos, int64_t window_len, float* out);
  void compress(const CompressorW& w, float* st_kv, float* st_score, const float* x, int64_t n,
                int64_t start_pos, float* entries, bool indexer);
  void moe(const MoeW& w, bool hash, const int32_t* ids, const float* x, int64_t n, float* out);
  std::vector<float> head_logits(const float* streams_last, const HcW& hc_head, const float* norm);

  // Sums a partial [count] fp32 activation over the tensor-parallel ranks and rounds it to
  // bf16 (no-op with one rank). Called after wo_b and after the MoE.
  void tp_reduce(float* x, int64_t count);

  model::ModelConfig config_;
  std::unique_ptr<GpuWeights> weights_;
  int64_t max_len_ = 0;
  int tp_rank_ = 0, tp_size_ = 1;
  DeviceBuffer<float> rope_window_, rope_compress_;  // [max_len, pairs, 2]
  std::unique_ptr<Workspace> ws_;
  // Grouped tensor-core MoE (sm90_moe_fp4.cu) where its shape limits allow (FP4 experts,
  // hidden and expert widths multiples of 256; calls of ≤ 256 tokens); else the plain path.
  // DSV4_GPU_MOE=reference forces the plain path.
  bool grouped_moe_usable(const MoeW& w) const;
  void moe_grouped(const MoeW& w, int64_t n, const float* x, const int32_t* eids,
                   const float* ewts, float* out);
  std::unique_ptr<MoeGroupedWorkspace> moe_ws_;
  std::vector<std::pair<const MoeW*, DeviceBuffer<MoeExpertPtrs>>> moe_ptrs_;
};

}  // namespace dsv4::gpu
