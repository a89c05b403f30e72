// The DeepSeek-V4 forward pass on one CUDA device, with the API shape of cpu::CpuModel.
//
// Semantics are the CPU reference's (spec §4): prefill from 0 at any length, then any
// number of tokens per call; prompt_length keeps chunked prefill in the one-shot candidate
// layout. Per-sequence state (window ring, compressed KV, indexer keys, compressor states)
// lives on the device in GpuSequenceState, sized for opts.max_seq_len positions.
// Batched decode (decode()): one new token for each of B prefilled sequences in one pass,
// bit-identical to B single-token forward() calls; optionally replayed from CUDA graphs
// captured per batch size (enable_decode_graphs), a batch padded to the next captured size.
// Thread-safety: a GpuModel owns scratch buffers and its own CUDA stream (a blocking stream,
// so it is ordered after legacy-stream uploads); use it from one thread at a time. Every
// public call returns after the device finished.
// Tensor parallelism (GpuModelOptions::tp_size > 1, built by load/from_checkpoint/dummy):
// the returned model is rank 0 on device 0 and drives its peers (ranks 1.., devices 1..) on
// a TpGroup's threads; every public call runs on all ranks and returns rank 0's result;
// sequence states carry the peers' states.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "gpu/cuda_check.h"
#include "gpu/decode_ops.h"
#include "gpu/gpu_weights.h"
#include "gpu/moe_grouped.h"
#include "gpu/ops.h"
#include "gpu/sampling.h"
#include "gpu/stream_fork.h"
#include "gpu/tp_group.h"
#include "model/model_config.h"

namespace dsv4::gpu {

struct SparseAttnArgs;  // ops.h

struct GpuModelOptions {
  int64_t max_seq_len = 0;  // 0 = min(max_position_embeddings, 65536)
  // Tensor parallelism: this model is shard tp_rank of tp_size (heads, output groups and the
  // expert/shared-expert intermediate dims split; everything else replicated).
  int tp_rank = 0;
  int tp_size = 1;
  // The CSA indexer and sparse attention of batched decode and of forward() (prefill): the
  // sm_90a tensor-core kernels where the device and shapes allow (decode_ops.h
  // choose_decode_attn_path; tolerance-equal to the plain ones), or with plain_decode_attention
  // the plain kernels (ops.h; decode then bit-identical to forward()).
  bool plain_decode_attention = false;
};

// One layer's state. Owning buffers from new_sequence(), or non-owning views into a
// GpuStatePool slot (state_pool.h); the kernels only use get() / size() / bytes().
// The main KV caches hold 512-wide entries in the 584-byte FP8 layout (kv_fp8.h: pages of 64
// entries, kv_cache_bytes(entries) bytes; the stored values are exactly the reference's
// Q8-simulated KV); indexer keys and compressor states stay fp32.
struct GpuLayerCache {
  DeviceBuffer<uint8_t> window;      // sliding_window entries (ring slot p % sliding_window)
  DeviceBuffer<uint8_t> compressed;  // max(1, max_seq_len / ratio) entries
  DeviceBuffer<uint16_t> index_keys;  // [max_seq_len / ratio, index_head_dim] bf16 bits (exact)
  DeviceBuffer<float> comp_kv, comp_score;    // [slots, width]
  DeviceBuffer<float> index_kv, index_score;  // [slots, width]
};

struct GpuSequenceState {
  std::vector<GpuLayerCache> layers;  // trunk layers, then MTP blocks
  int64_t length = 0;
  int64_t mtp_length = 0;
  std::vector<GpuSequenceState> peers;  // tensor parallelism: ranks 1.. (their own devices)
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
  cudaStream_t stream() const { return stream_; }

  GpuForwardOutput forward(GpuSequenceState& state, std::span<const int32_t> tokens,
                           bool want_layer_streams = false, int64_t prompt_length = 0,
                           bool want_final_streams = true);

  // Batched decode: one new token tokens[b] for each sequence *seqs[b] (distinct sequences, each
  // prefilled: length > 0, length < max_seq_len); logits [B, vocab] fp32; every length += 1.
  // Bit-identical to forward(*seqs[b], {tokens[b]}) per sequence on the plain attention path
  // (decode_attn_path() == kPlain); on kSm90 equal within the tensor-core kernels' tolerance,
  // and a graph replay equals eager decode bit for bit on either path. kAuto replays a CUDA graph
  // when graphs are enabled and B ≤ the largest captured size (capturing that size on first
  // use), padding B to the next captured size with a scratch sequence; otherwise (and with
  // kEager) launches eagerly.
  // sampling (optional): rows with params[b].on_device are sampled on the GPU (gpu/sampling.h)
  // and only results[b] comes back; the other rows' logits are copied into `logits` as above
  // (rows sampled on the device are left untouched there).
  enum class DecodeMode { kAuto, kEager };
  struct DecodeSampling {
    std::span<const SampleParams> params;  // [B]
    std::span<SampleResult> results;       // [B]
  };
  void decode(std::span<GpuSequenceState* const> seqs, std::span<const int32_t> tokens, std::span<float> logits,
              DecodeMode mode = DecodeMode::kAuto, const DecodeSampling* sampling = nullptr);

  // CUDA graphs for decode: batch sizes decode_graph_batch_sizes(max_bs) (1, 2, 4, 8, 12, 16,
  // 24, 32, then multiples of 8 up to max_bs, and max_bs itself). max_bs ≤ 0 disables them
  // (drops captured graphs). Graph scratch is sized for max_bs on the first capture.
  void enable_decode_graphs(int max_bs);
  static std::vector<int> decode_graph_batch_sizes(int max_bs);
  bool decode_graphs_enabled() const { return !graph_sizes_.empty(); }
  const std::vector<int>& decode_graph_sizes() const { return graph_sizes_; }
  // Captures every size not captured yet; returns the seconds it took.
  double capture_decode_graphs();
  int decode_graphs_captured() const;
  // The decode attention / indexer kernels this model runs (chosen at load).
  DecodeAttnPath decode_attn_path() const { return attn_path_; }

  // MTP block 0 over the positions of the last trunk call (streams [n, hc, D] from it).
  std::vector<float> mtp_forward(GpuSequenceState& state, std::span<const float> streams,
                                 std::span<const int32_t> next_ids, int64_t start_pos);

  // Benchmarks only: makes a fresh state look like `length` prefilled positions without
  // running the prefill — window ring, compressed entries and indexer keys get random
  // values (seeded), compressor states stay reset. Decode from it costs what decode after a
  // real prefill of that length costs; its logits mean nothing.
  void fill_for_benchmark(GpuSequenceState& state, int64_t length, uint64_t seed);

 private:
  // Builds a model of tp ranks (weights(rank) runs on that rank's device and thread).
  static std::unique_ptr<GpuModel> build_ranks(
      const model::ModelConfig& config, GpuModelOptions opts,
      const std::function<std::unique_ptr<GpuWeights>(int rank)>& weights);
  // This rank's part of the public calls.
  GpuSequenceState new_sequence_shard() const;
  GpuForwardOutput forward_shard(GpuSequenceState& state, std::span<const int32_t> tokens,
                                 bool want_layer_streams, int64_t prompt_length, bool want_final_streams);
  std::vector<float> mtp_forward_shard(GpuSequenceState& state, std::span<const float> streams,
                                       std::span<const int32_t> next_ids, int64_t start_pos);
  // logits empty: compute but do not download (tensor-parallel peers).
  void decode_shard(std::span<GpuSequenceState* const> seqs, std::span<const int32_t> tokens,
                    std::span<float> logits, DecodeMode mode, const DecodeSampling* sampling = nullptr);
  void enable_decode_graphs_shard(int max_bs);
  double capture_decode_graphs_shard();
  // Runs f(shard, rank) on every tensor-parallel rank (its device and thread; one rank:
  // directly on this model). Validate inputs before: a rank that throws aborts the group.
  void on_ranks(const std::function<void(GpuModel& shard, int rank)>& f);
  // Throws unless state carries one peer state per peer rank.
  void check_peer_states(const GpuSequenceState& state) const;
  // Rank r's part of a sequence state (0: the state itself).
  static GpuSequenceState& shard_state(GpuSequenceState& state, int rank);

  struct Workspace;
  // The Q8 of a block's attention input x [n, D] (quantize_q8_rows layout: codes [n, D] e4m3,
  // scales [n, D/128]) when mHC pre wrote it alongside x; codes == nullptr: not available.
  struct XQ8 {
    const uint8_t* codes = nullptr;
    const float* scales = nullptr;
  };
  // One block on n rows of streams [n, hc, D] (in place): mHC pre, attend(x, xq, out) (the
  // prefill or the decode attention), mHC post, then the same around the MoE.
  void block(const BlockW& w, int layer, const int32_t* ids, int64_t n, float* streams,
             const std::function<void(const float* x, XQ8 xq, float* out)>& attend);
  // Attention step 1 (q and window-KV paths) on n rows of x [n, D]: Q8, wq_a/wkv, q_norm + Q8,
  // wq_b, head RMS + RoPE of q, kv_norm + RoPE + Q8 simulation of kv's no-rope part (fused_rows.cu)
  // at the rows' positions `pos` (one per row of x, q's heads share it; prefill: pos0 = start_pos;
  // decode: each row's own) from the RoPE table `rope`. Returns workspace views: qa/sa hold
  // Q8(q_norm(wq_a x)) (the indexer reads them), q [n, H_local, d], kv [n, d].
  struct QkvRows {
    uint8_t* qa = nullptr;
    float* sa = nullptr;
    float* q = nullptr;
    float* kv = nullptr;
  };
  // ring: decode on the sm_90a path — the same launch also writes each row's kv into its window
  // ring entry (decode_kv_rows_to_ring; pos.positions set); null: the caller updates the ring.
  // xq: x's Q8 when the caller has it (skips the quantize launch), else computed here.
  // after_qa: launches of the caller's on the model's stream once qa / sa (the Q8 of q_norm) are
  // written, before wq_b (decode: the indexer's queries). kv_side: runs the window-KV row (and
  // ring) launch on that stream, ordered after wkv's output.
  QkvRows project_qkv(const AttentionW& w, const float* x, XQ8 xq, int64_t n, RowPositions pos, const float* rope,
                      const DecodeLayerCache* ring, const std::function<void(uint8_t*, float*)>& after_qa = {},
                      StreamFork* kv_side = nullptr);
  // Attention step 5 after the inverse RoPE: grouped wo_a (bf16 arithmetic; e4m3-stored weights
  // widened in registers) on attn [n, H_local·d], Q8
  // into qa/sa (scratch of ≥ n·G·r_o), wo_b (FP8) into out [n, D], summed over the ranks.
  // attn16 / attn16_exact (decode, FP8 wo_a): attn's bf16 bits and its per-row exactness (ops.h
  // dense_linear_fp8).
  void output_projection(const AttentionW& w, const float* attn, int64_t n, uint8_t* qa, float* sa, float* out,
                         const uint16_t* attn16 = nullptr, const int32_t* attn16_exact = nullptr);
  void block_forward(const BlockW& w, int layer, GpuLayerCache& cache, const int32_t* ids,
                     int64_t start_pos, int64_t n, int64_t window_len, float* streams);
  // Prefill / forward attention (gpu_model_prefill_attn.cpp): the plain kernels (ops.h) or, on
  // attn_path_ == kSm90, the sm_90a ones through the two helpers below.
  void attention(const AttentionW& w, int ratio, GpuLayerCache& cache, const float* x, XQ8 xq, int64_t n,
                 int64_t start_pos, int64_t window_len, float* out);
  // sm_90a prefill, rows = the n positions start_pos.. of one sequence (pos: device [n]).
  // Indexer: iq [n, HI, dh], iw [n, HI] against the fp32 keys → sel [n, index_topk] (−1
  // padded) and cnt [n], as index_scores + index_topk (tolerance-equal).
  void prefill_index_sm90(const float* iq, const float* iw, int64_t n, int64_t start_pos, const int32_t* pos,
                          int ratio, const uint16_t* keys, int32_t* sel, int32_t* cnt);
  // Attention as sparse_attention(a) (a.n rows at a.start_pos; tolerance-equal): the window
  // rows (ring entries before start_pos, then a.kv_new) are staged in a linear FP8 pool, the
  // compressed list is a.selected (CSA) or implicit (HCA). Reads the ring: call before the
  // ring update.
  void prefill_attend_sm90(const SparseAttnArgs& a, const int32_t* pos);
  // Compressor over n tokens: the indexer's (keys != null: bf16 keys [entries, h]) or the
  // attention's (cache != null: FP8 entries); raw entries staged in fp32 in the workspace.
  void compress(const CompressorW& w, float* st_kv, float* st_score, const float* x, int64_t n,
                int64_t start_pos, uint16_t* keys, uint8_t* cache);
  void moe(const MoeW& w, bool hash, const int32_t* ids, const float* x, int64_t n, float* out);
  std::vector<float> head_logits(const float* streams_last, const HcW& hc_head, const float* norm);
  // LM head over `rows` rows of streams [rows, hc, D]; returns the device logits [rows, vocab]
  // (in the active workspace).
  float* head_logits_rows(const float* streams, int64_t rows, const HcW& hc_head, const float* norm);
  GpuSequenceState new_sequence_for(int64_t positions) const;

  // Batched decode internals (gpu_model_decode.cpp).
  struct DecodeStep;
  struct DecodeGraph;
  void decode_pass(const DecodeStep& step);
  void block_decode(const BlockW& w, int layer, const DecodeStep& step, float* streams);
  void attention_decode(const AttentionW& w, int layer, int ratio, const DecodeStep& step, const float* x, XQ8 xq,
                        float* out);
  // pkv / psc: the compressor's kv and gate projections of this step's rows [rows, width].
  void compress_decode(const CompressorW& w, int layer, const DecodeStep& step, const float* pkv, const float* psc,
                       bool indexer, cudaStream_t s);
  // The compressors of a decode layer (ratio > 0): every bf16 projection of x they and the
  // indexer need in one launch (the indexer's head weights into iw), then the indexer's and the
  // attention's compressor steps, on stream s. Returns the indexer head weights [rows, HI] (null
  // without an indexer).
  float* compressors_decode(const AttentionW& w, int layer, const DecodeStep& step, const float* x, cudaStream_t s);
  // Host inputs of a step for `rows` rows (rows ≥ seqs.size(): the rest are padding rows) and
  // their upload into ws.decode_in; returns the device view.
  DecodeStep stage_decode_inputs(Workspace& ws, std::span<GpuSequenceState* const> seqs,
                                 std::span<const int32_t> tokens, int64_t rows, bool graph_bounds);
  DecodeGraph& capture_decode_graph(int batch);
  void release_decode_graphs();

  // Sums a partial [count] fp32 activation over the tensor-parallel ranks (no-op with one rank),
  // unrounded: its one consumer, hc_post, reads it as bf16 (round_f = tp_size_ > 1).
  void tp_reduce(float* x, int64_t count);
  // A sub-layer's output sub [n, D] (wo_b's or the MoE's; a partial sum with TP) into the
  // streams [n, hc, D]: tp_reduce then hc_post, or both in one launch (the one-shot all-reduce's
  // hc_post epilogue, same bits) for up to 16 rows that the group sums on its one-shot kernel.
  void reduce_post(float* sub, const float* post, const float* comb, int64_t n, float* streams);

  model::ModelConfig config_;
  std::unique_ptr<GpuWeights> weights_;
  int64_t max_len_ = 0;
  int tp_rank_ = 0, tp_size_ = 1;
  std::shared_ptr<TpGroup> tp_group_;                 // null with one rank
  std::vector<std::unique_ptr<GpuModel>> peers_;      // rank 0 only: ranks 1..tp-1
  DeviceBuffer<float> rope_window_, rope_compress_;  // [max_len, pairs, 2]
  DeviceBuffer<SampleParams> sample_params_;         // [B] of the last sampled decode
  DeviceBuffer<SampleResult> sample_results_;
  DeviceBuffer<float> sample_scratch_;               // [B, vocab] candidates' probabilities
  std::unique_ptr<Workspace> ws_;
  Workspace* active_ws_ = nullptr;  // ws_, or graph_ws_ while a decode graph is captured
  cudaStream_t stream_ = nullptr;
  // Decode batches of ≤ 16 rows: a second stream for the compressors and the indexer's scan of
  // each compressed layer (in layers without an indexer, the window-KV row instead), forked from
  // stream_ after the mHC pre step (the scan waits for the indexer's queries, which the model
  // stream computes right after qa; the KV row for wkv's output) and joined before the attention
  // (both streams' launches are latency-bound at small batches, so the branch runs under the q
  // path). Off with DSV4_DECODE_BRANCH=0 (the same kernels in one stream, same results).
  StreamFork side_;
  // CUDA-graph decode: sizes, captured graphs (ascending batch), their workspace, the padding
  // sequence (always at position 0) and the host staging of the step inputs.
  std::vector<int> graph_sizes_;
  std::vector<std::unique_ptr<DecodeGraph>> graphs_;
  std::unique_ptr<Workspace> graph_ws_;
  bool graph_ws_ready_ = false;
  std::unique_ptr<GpuSequenceState> pad_seq_;
  std::vector<uint8_t> decode_staging_;
  // Decode attention kernels (choose_decode_attn_path at load) and the SMs they fill.
  DecodeAttnPath attn_path_ = DecodeAttnPath::kPlain;
  int num_sms_ = 1;
  // The row count decode attention splits are planned for: the graph size a batch of n pads
  // to (so eager decode and graph replay split alike), else n.
  int64_t attn_split_rows(int64_t n) const;
  // Grouped tensor-core MoE (sm90_moe_fp4.cu) where its shape limits allow (FP4 experts,
  // hidden and expert widths multiples of 256; calls of ≤ 256 tokens); else the plain path.
  // DSV4_GPU_MOE=reference forces the plain path.
  bool grouped_moe_usable(const MoeW& w) const;
  void moe_grouped(const MoeW& w, int64_t n, const float* x, const int32_t* eids,
                   const float* ewts, float* out);
  std::unique_ptr<MoeGroupedWorkspace> moe_ws_;        // calls of ≤ kMoeDecodeTokens (decode graphs hold it)
  std::unique_ptr<MoeGroupedWorkspace> moe_ws_large_;  // prefill calls of ≤ kMoePrefillTokens, made on first use
  std::vector<std::pair<const MoeW*, DeviceBuffer<MoeExpertPtrs>>> moe_ptrs_;
};

}  // namespace dsv4::gpu
