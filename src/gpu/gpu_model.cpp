// GpuModel: orchestration of the kernels in ops.h, step for step the CPU reference's order
// (cpu/model.cpp, attention.cpp, compressor.cpp, indexer.cpp). The MoE sublayer is
// gpu_model_moe.cpp, the prefill attention gpu_model_prefill_attn.cpp, decode gpu_model_decode.cpp.
#include "gpu/gpu_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

#include "base/check.h"
#include "gpu/gpu_model_workspace.h"
#include "gpu/kv_fp8.h"
#include "gpu/ops.h"
#include "gpu/profiler.h"
#include "gpu/state_pool.h"
#include "model/rope_policy.h"
#include "model/tensor_inventory.h"
#include "numerics/rope.h"

namespace dsv4::gpu {
namespace {

// The mHC projection y [n, out] = fn · streams (fp32 out; out = (2+hc)·hc or hc): the split-K
// small-output kernel, or the dense path for configs with more outputs than it takes.
void hc_projection(const float* streams, int64_t n, const DenseW& fn, int64_t out, int64_t in,
                   DeviceBuffer<double>& ws, float* y, cudaStream_t s) {
  if (out > kSmallOutMax) return dense_linear(streams, n, in, fn.w.get(), fn.bf16, out, in, 0, false, 0.0f, y, s);
  const int64_t need = small_out_linear_workspace(n, out, in);
  small_out_linear(streams, n, in, fn.w.get(), fn.bf16, out, in, grow(ws, need), need, y, s);
}

void upload_rope(const numerics::RopeParams& p, int64_t max_len, DeviceBuffer<float>& dst) {
  const numerics::RopeTable t(p, max_len, max_len);
  const int pairs = t.pairs();
  std::vector<float> v(static_cast<size_t>(max_len) * pairs * 2);
  for (int64_t pos = 0; pos < max_len; ++pos)
    for (int i = 0; i < pairs; ++i) {
      v[(pos * pairs + i) * 2] = t.cos(pos, i);
      v[(pos * pairs + i) * 2 + 1] = t.sin(pos, i);
    }
  dst.upload(v);
}

int64_t window_part(int64_t start_pos, int64_t n, int64_t prompt_length, int window) {
  if (prompt_length > 0 && start_pos + n <= prompt_length) return std::min<int64_t>(prompt_length, window);
  if (start_pos == 0) return std::min<int64_t>(n, window);
  return window;
}

}  // namespace

GpuModel::GpuModel(model::ModelConfig config, std::unique_ptr<GpuWeights> weights, GpuModelOptions opts)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      tp_rank_(opts.tp_rank),
      tp_size_(opts.tp_size),
      ws_(std::make_unique<Workspace>()) {
  active_ws_ = ws_.get();
  DSV4_CHECK(tp_size_ >= 1 && tp_rank_ >= 0 && tp_rank_ < tp_size_, "tensor-parallel rank ", tp_rank_, " of ",
             tp_size_);
  DSV4_CHECK(config_.head_dim == kKvDim && config_.qk_rope_head_dim == kKvRopeDim, "the GPU backend's FP8 KV caches ",
             "need head_dim ", kKvDim, " and qk_rope_head_dim ", kKvRopeDim, ", got ", config_.head_dim, " and ",
             config_.qk_rope_head_dim);
  max_len_ = opts.max_seq_len > 0 ? std::min<int64_t>(opts.max_seq_len, config_.max_position_embeddings)
                                  : std::min<int64_t>(config_.max_position_embeddings, 65536);
  upload_rope(model::rope_params(config_, false), max_len_, rope_window_);
  upload_rope(model::rope_params(config_, true), max_len_, rope_compress_);
  CUDA_CHECK(cudaStreamCreate(&stream_));  // blocking: ordered after legacy-stream uploads
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
  const bool csa = config_.index_topk > 0 && config_.index_n_heads > 0;
  attn_path_ = opts.plain_decode_attention
                   ? DecodeAttnPath::kPlain
                   : choose_decode_attn_path(device, local_heads(), csa ? config_.index_n_heads : 0,
                                             config_.index_head_dim, config_.index_topk);
}

GpuModel::~GpuModel() {
  release_decode_graphs();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void GpuModel::tp_reduce(float* x, int64_t count) {
  if (tp_size_ == 1) return;
  {
    // Bytes: this rank's partial out and the sum in (what the link moves per rank, 2 ranks).
    prof::Launch pl(tp_group_->uses_one_shot(count) ? "all_reduce (p2p one-shot)" : "all_reduce (nccl)",
                    2.0 * static_cast<double>(count) * sizeof(float), stream_);
    tp_group_->all_reduce_sum(tp_rank_, x, count, stream_);
  }
}

void GpuModel::reduce_post(float* sub, const float* post, const float* comb, int64_t n, float* streams) {
  const int64_t D = config_.hidden_size;
  const int hc = config_.hc_mult;
  // Up to 16 rows: the one-shot kernel's 24 blocks then also carry hc_post's streams (2×H200 TP2
  // Flash, same call: B=1 7312 -> 7205 us, B=16 16411 -> 16085; at B=64, 8 MB of streams on 24
  // blocks, 31743 -> 31844 / 32475, so larger batches keep the separate hc_post).
  constexpr int64_t kFuseMaxRows = 16;
  const P2pAllReduce::HcPost fused{.post = post, .comb = comb, .streams = streams, .dim = D};
  if (tp_size_ > 1 && hc == 4 && n <= kFuseMaxRows && tp_group_->fuses_hc_post(sub, n * D, fused)) {
    // Bytes: the link's partial out and sum in, plus hc_post's streams read and written.
    prof::Launch pl("all_reduce (p2p one-shot + hc_post)",
                    2.0 * static_cast<double>(n * D) * sizeof(float) + double(n) * hc * D * 8, stream_);
    const bool launched = tp_group_->all_reduce_sum_hc_post(tp_rank_, sub, n * D, fused, stream_);
    DSV4_CHECK(launched, "all_reduce_sum_hc_post refused a sum its checks accepted");
    return;
  }
  tp_reduce(sub, n * D);
  hc_post(sub, post, comb, n, D, hc, tp_size_ > 1, streams, stream_);
}

std::unique_ptr<GpuModel> GpuModel::build_ranks(const model::ModelConfig& config, GpuModelOptions opts,
                                                const std::function<std::unique_ptr<GpuWeights>(int)>& weights) {
  config.validate();
  if (opts.tp_size == 1) return std::make_unique<GpuModel>(config, weights(0), opts);
  auto group = std::make_shared<TpGroup>(opts.tp_size);
  std::vector<std::unique_ptr<GpuModel>> ranks(static_cast<size_t>(opts.tp_size));
  group->run([&](int r) {
    GpuModelOptions o = opts;
    o.tp_rank = r;
    ranks[r] = std::make_unique<GpuModel>(config, weights(r), o);
    ranks[r]->tp_group_ = group;
  });
  for (int r = 1; r < opts.tp_size; ++r) ranks[0]->peers_.push_back(std::move(ranks[r]));
  return std::move(ranks[0]);
}

std::unique_ptr<GpuModel> GpuModel::from_checkpoint(const model::ModelConfig& config,
                                                    const checkpoint::Checkpoint& ckpt, GpuModelOptions opts) {
  config.validate();
  model::verify_checkpoint(ckpt, config);
  return build_ranks(config, opts, [&](int r) { return upload_weights(ckpt, config, r, opts.tp_size); });
}

std::unique_ptr<GpuModel> GpuModel::load(const std::filesystem::path& dir, GpuModelOptions opts) {
  const auto config = model::ModelConfig::from_file(dir / "config.json");
  const auto ckpt = checkpoint::Checkpoint::open(dir);
  return from_checkpoint(config, ckpt, opts);
}

std::unique_ptr<GpuModel> GpuModel::dummy(const model::ModelConfig& config, uint64_t seed, GpuModelOptions opts) {
  return build_ranks(config, opts, [&](int r) { return dummy_weights(config, seed, r, opts.tp_size); });
}

GpuSequenceState GpuModel::new_sequence() const {
  if (peers_.empty()) return new_sequence_shard();
  GpuSequenceState own;
  std::vector<GpuSequenceState> peer_states(peers_.size());
  tp_group_->run([&](int r) {
    if (r == 0) own = new_sequence_shard();
    else peer_states[r - 1] = peers_[r - 1]->new_sequence_shard();
  });
  own.peers = std::move(peer_states);
  return own;
}

void GpuModel::on_ranks(const std::function<void(GpuModel& shard, int rank)>& f) {
  if (peers_.empty()) return f(*this, 0);
  tp_group_->run([&](int r) { f(r == 0 ? *this : *peers_[r - 1], r); });
}

void GpuModel::check_peer_states(const GpuSequenceState& state) const {
  DSV4_CHECK(state.peers.size() == peers_.size(), "sequence state has ", state.peers.size(),
             " peer states for a model of ", peers_.size() + 1, " ranks");
}

GpuSequenceState& GpuModel::shard_state(GpuSequenceState& state, int rank) {
  return rank == 0 ? state : state.peers[rank - 1];
}

GpuForwardOutput GpuModel::forward(GpuSequenceState& state, std::span<const int32_t> tokens, bool want_layer_streams,
                                   int64_t prompt_length, bool want_final_streams) {
  check_peer_states(state);
  GpuForwardOutput out;
  on_ranks([&](GpuModel& m, int r) {
    auto o = m.forward_shard(shard_state(state, r), tokens, r == 0 && want_layer_streams, prompt_length,
                             r == 0 && want_final_streams);
    if (r == 0) out = std::move(o);
  });
  return out;
}

std::vector<float> GpuModel::mtp_forward(GpuSequenceState& state, std::span<const float> streams,
                                         std::span<const int32_t> next_ids, int64_t start_pos) {
  check_peer_states(state);
  std::vector<float> out;
  on_ranks([&](GpuModel& m, int r) {
    auto o = m.mtp_forward_shard(shard_state(state, r), streams, next_ids, start_pos);
    if (r == 0) out = std::move(o);
  });
  return out;
}

void GpuModel::decode(std::span<GpuSequenceState* const> seqs, std::span<const int32_t> tokens,
                      std::span<float> logits, DecodeMode mode, const DecodeSampling* sampling) {
  DSV4_CHECK(logits.size() == seqs.size() * static_cast<size_t>(config_.vocab_size), "decode: logits buffer has ",
             logits.size(), " floats, needs ", seqs.size() * static_cast<size_t>(config_.vocab_size));
  std::vector<std::vector<GpuSequenceState*>> rank_seqs(peers_.size() + 1);
  for (GpuSequenceState* s : seqs) {
    DSV4_CHECK(s != nullptr, "decode: null sequence state");
    check_peer_states(*s);
    for (size_t r = 0; r < rank_seqs.size(); ++r) rank_seqs[r].push_back(&shard_state(*s, static_cast<int>(r)));
  }
  // Only rank 0's logits are returned; the peers skip their download.
  on_ranks([&](GpuModel& m, int r) { m.decode_shard(rank_seqs[r], tokens, r == 0 ? logits : std::span<float>(), mode, r == 0 ? sampling : nullptr);
  });
}

void GpuModel::enable_decode_graphs(int max_bs) {
  on_ranks([&](GpuModel& m, int) { m.enable_decode_graphs_shard(max_bs); });
}

double GpuModel::capture_decode_graphs() {
  const auto t0 = std::chrono::steady_clock::now();
  on_ranks([&](GpuModel& m, int) { m.capture_decode_graphs_shard(); });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

GpuSequenceState GpuModel::new_sequence_shard() const { return new_sequence_for(max_len_); }

GpuSequenceState GpuModel::new_sequence_for(int64_t positions) const {
  GpuSequenceState s;
  const std::vector<LayerStateShape> shape = sequence_state_shape(config_, *weights_, positions);
  s.layers.resize(shape.size());
  for (size_t l = 0; l < shape.size(); ++l) {
    GpuLayerCache& c = s.layers[l];
    const LayerStateShape& sh = shape[l];
    c.window.resize(static_cast<size_t>(kv_cache_bytes(sh.window)));
    c.window.fill_bytes(0);
    c.comp_kv.resize(static_cast<size_t>(sh.comp_state));
    c.comp_score.resize(static_cast<size_t>(sh.comp_state));
    compressor_reset(c.comp_kv.get(), c.comp_score.get(), sh.comp_state, stream_);
    c.compressed.resize(static_cast<size_t>(kv_cache_bytes(sh.compressed)));
    c.index_kv.resize(static_cast<size_t>(sh.index_state));
    c.index_score.resize(static_cast<size_t>(sh.index_state));
    compressor_reset(c.index_kv.get(), c.index_score.get(), sh.index_state, stream_);
    c.index_keys.resize(static_cast<size_t>(sh.index_keys));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return s;
}

void GpuModel::compress(const CompressorW& w, float* st_kv, float* st_score, const float* x, int64_t n,
                        int64_t start_pos, uint16_t* keys, uint8_t* cache) {
  Workspace& s = *active_ws_;
  const int64_t width = (w.overlap ? 2 : 1) * int64_t{w.head_dim}, D = config_.hidden_size;
  float* pkv = grow(s.cproj_kv, n * width);
  float* psc = grow(s.cproj_sc, n * width);
  dense_linear(x, n, D, w.wkv.w.get(), w.wkv.bf16, width, D, 0, false, 0.0f, pkv, stream_);
  dense_linear(x, n, D, w.wgate.w.get(), w.wgate.bf16, width, D, 0, false, 0.0f, psc, stream_);
  // Raw entries first..total−1 staged in fp32, finished there and stored as the indexer's bf16
  // keys or encoded into the FP8 cache.
  const int64_t first = start_pos / w.ratio, total = (start_pos + n) / w.ratio;
  float* rows = grow(s.craw, std::max<int64_t>(1, total - first) * w.head_dim);
  compressor_step(pkv, psc, w.ape.get(), n, start_pos, w.ratio, w.head_dim, w.overlap, st_kv, st_score, rows, stream_);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (keys != nullptr)
    compressor_finish_index_keys(rows, first, total - first, w.head_dim, w.norm.get(), eps, w.ratio,
                                 rope_compress_.get(), config_.qk_rope_head_dim / 2, keys, stream_);
  else
    compressor_finish(rows, first, total - first, w.head_dim, w.norm.get(), eps, w.ratio, rope_compress_.get(),
                      config_.qk_rope_head_dim / 2, cache, stream_);
}

GpuModel::QkvRows GpuModel::project_qkv(const AttentionW& w, const float* x, XQ8 xq, int64_t n, RowPositions pos,
                                         const float* rope, const DecodeLayerCache* ring,
                                         const std::function<void(uint8_t*, float*)>& after_qa,
                                         StreamFork* kv_side) {
  Workspace& s = *active_ws_;
  const model::ModelConfig& c = config_;
  const int64_t D = c.hidden_size, H = local_heads(), d = c.head_dim, ql = c.q_lora_rank;
  const int pairs = c.qk_rope_head_dim / 2;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t qmax = std::max<int64_t>({D, ql, local_groups() * c.o_lora_rank});
  QkvRows r;
  r.qa = grow(s.qa, n * qmax);
  r.sa = grow(s.sa, n * qmax / 128);
  float* tq = grow(s.tq, n * ql);
  r.q = grow(s.q, n * H * d);
  float* tkv = grow(s.tkv, n * d);
  r.kv = grow(s.kv, n * d);
  if (xq.codes == nullptr) {
    quantize_q8_rows(x, n, D, r.qa, r.sa, stream_);
    xq = XQ8{.codes = r.qa, .scales = r.sa};
  }
  const Lin8Out qkv[2] = {{.w = w.wq_a.w.get(), .ws = w.wq_a.s.get(), .out = ql, .y = tq},
                         {.w = w.wkv.w.get(), .ws = w.wkv.s.get(), .out = d, .y = tkv}};
  lin8_multi(xq.codes, xq.scales, n, D, std::span<const Lin8Out>(qkv, 2), stream_);  // wq_a and wkv in one launch
  cudaStream_t ks = stream_;  // the window-KV row's stream
  if (kv_side != nullptr) {
    ks = kv_side->stream();
    kv_side->order(stream_, ks);
  }
  rms_norm_q8_rows(tq, w.q_norm.get(), n, ql, eps, nullptr, r.qa, r.sa, stream_);  // qa/sa: Q8(q_norm(tq))
  if (after_qa) after_qa(r.qa, r.sa);
  lin8(r.qa, r.sa, n, 1, w.wq_b.w.get(), w.wq_b.s.get(), H * d, ql, nullptr, r.q, stream_);
  head_rms_rope_rows(r.q, n * H, static_cast<int>(d), eps, rope, pairs,
                     RowPositions{.positions = pos.positions, .pos0 = pos.pos0, .rows_per_pos = H}, stream_);
  if (ring != nullptr) {
    decode_kv_rows_to_ring(tkv, w.kv_norm.get(), n, static_cast<int>(d), eps, rope, pairs, pos.positions, 64, r.kv,
                           ring, c.sliding_window, ks);
  } else {
    norm_rope_simulate_q8_rows(tkv, w.kv_norm.get(), n, static_cast<int>(d), eps, rope, pairs, pos, 64, r.kv, ks);
  }
  return r;
}

void GpuModel::output_projection(const AttentionW& w, const float* attn, int64_t n, uint8_t* qa, float* sa,
                                 float* out, const uint16_t* attn16, const int32_t* attn16_exact) {
  Workspace& s = *active_ws_;
  const model::ModelConfig& c = config_;
  const int64_t D = c.hidden_size, H = local_heads(), d = c.head_dim;
  const int64_t G = local_groups(), ro = c.o_lora_rank, group_in = H / G * d;
  float* z = grow(s.z, n * G * ro);
  if (w.wo_a.fp8()) {
    uint16_t* wide = n > kDenseFp8MaxRows ? grow(s.wo_a_wide, G * ro * group_in) : nullptr;  // prefill
    dense_linear_fp8(attn, n, H * d, w.wo_a.w.get(), w.wo_a.s.get(), G * ro, group_in, ro, true, z, stream_, wide,
                     attn16, attn16_exact);
  } else {
    dense_linear(attn, n, H * d, w.wo_a.w.get(), w.wo_a.bf16, G * ro, group_in, ro, true, 0.0f, z, stream_);
  }
  quantize_q8_rows(z, n, G * ro, qa, sa, stream_);
  const bool whole = tp_size_ == 1;  // else partial sums, rounded after the all-reduce (reduce_post)
  lin8(qa, sa, n, 1, w.wo_b.w.get(), w.wo_b.s.get(), D, G * ro, nullptr, out, stream_, whole);
}

void GpuModel::block(const BlockW& w, int layer, const int32_t* ids, int64_t n, float* streams,
                     const std::function<void(const float* x, XQ8 xq, float* out)>& attend) {
  Workspace& s = *active_ws_;
  const int hc = config_.hc_mult;
  const int64_t D = config_.hidden_size, M = int64_t{hc} * (2 + hc);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const HcDeviceParams hp{hc, config_.hc_sinkhorn_iters, static_cast<float>(config_.hc_eps), eps};
  float* mixed = grow(s.mixed, n * D);
  float* x = grow(s.x, n * D);
  float* post = grow(s.post, n * hc);
  float* comb = grow(s.comb, n * hc * hc);
  float* mixes = grow(s.mixes, n * M);
  float* sub = grow(s.sub, n * D);
  // want_q8: also x's Q8 (the attention's first lin8 input), returned when the fused kernel ran.
  auto pre = [&](const HcW& hw, const DeviceBuffer<float>& norm, bool want_q8) -> XQ8 {
    // Projection partials + one fused kernel (mixes, Sinkhorn, stream sum, RMSNorm) per block of
    // rows — every row count takes the same kernels, so chunked and batched calls agree bitwise.
    if (M <= kSmallOutMax && hc_pre_norm_applies(hp, D, streams, x, norm.get())) {
      const bool q8 = want_q8 && D % 128 == 0;
      uint8_t* xq = q8 ? grow(s.xq, n * D) : nullptr;
      float* xs = q8 ? grow(s.xs, n * D / 128) : nullptr;
      for (int64_t r0 = 0; r0 < n; r0 += kSmallOutRowBlock) {
        const int64_t rows = std::min<int64_t>(kSmallOutRowBlock, n - r0);
        const int64_t need = small_out_linear_workspace(rows, M, hc * D);
        double* parts = grow(s.hc_parts, need);
        const float* st = streams + r0 * hc * D;
        const int64_t chunks =
            small_out_linear_partials(st, rows, hc * D, hw.fn.w.get(), hw.fn.bf16, M, hc * D, parts, need, stream_);
        const bool launched = hc_pre_norm(st, parts, chunks, rows, D, hw.scale.get(), hw.base.get(), hp,
                                          norm.get(), x + r0 * D, post + r0 * hc, comb + r0 * hc * hc, stream_,
                                          q8 ? xq + r0 * D : nullptr, q8 ? xs + r0 * D / 128 : nullptr);
        DSV4_CHECK(launched, "hc_pre_norm refused a row block of an accepted call");
      }
      return XQ8{.codes = xq, .scales = xs};
    }
    hc_projection(streams, n, hw.fn, M, hc * D, s.hc_parts, mixes, stream_);
    hc_pre_finish(streams, mixes, n, D, hw.scale.get(), hw.base.get(), hp, mixed, post, comb, stream_);
    rms_norm_rows(mixed, norm.get(), n, D, eps, x, stream_);
    return XQ8{};
  };
  const XQ8 xq = pre(w.hc_attn, w.attn_norm, true);
  attend(x, xq, sub);  // with TP: this rank's partial sum
  reduce_post(sub, post, comb, n, streams);
  pre(w.hc_ffn, w.ffn_norm, false);
  moe(w.ffn, config_.is_hash_layer(layer), ids, x, n, sub);
  reduce_post(sub, post, comb, n, streams);
}

void GpuModel::block_forward(const BlockW& w, int layer, GpuLayerCache& cache, const int32_t* ids,
                             int64_t start_pos, int64_t n, int64_t window_len, float* streams) {
  const int ratio = config_.compress_ratio(layer);
  block(w, layer, ids, n, streams, [&](const float* x, XQ8 xq, float* out) {
    attention(w.attn, ratio, cache, x, xq, n, start_pos, window_len, out);
  });
}

float* GpuModel::head_logits_rows(const float* streams, int64_t rows, const HcW& hc_head_w, const float* norm) {
  Workspace& s = *active_ws_;
  const int hc = config_.hc_mult;
  const int64_t D = config_.hidden_size, V = config_.vocab_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const HcDeviceParams hp{hc, config_.hc_sinkhorn_iters, static_cast<float>(config_.hc_eps), eps};
  float* mix = grow(s.head_mix, rows * hc);
  float* y = grow(s.head_y, rows * D);
  float* yn = grow(s.head_n, rows * D);
  float* logits = grow(s.head_logits, rows * V);
  hc_projection(streams, rows, hc_head_w.fn, hc, hc * D, s.hc_parts, mix, stream_);
  hc_head_finish(streams, mix, rows, D, hc_head_w.scale.get(), hc_head_w.base.get(), hp, y, stream_);
  rms_norm_rows(y, norm, rows, D, eps, yn, stream_);
  dense_linear(yn, rows, D, weights_->head.w.get(), weights_->head.bf16, V, D, 0, false, 0.0f, logits, stream_);
  return logits;
}

std::vector<float> GpuModel::head_logits(const float* streams_last, const HcW& hc_head_w, const float* norm) {
  const float* logits = head_logits_rows(streams_last, 1, hc_head_w, norm);
  std::vector<float> out(static_cast<size_t>(config_.vocab_size));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), logits, out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

GpuForwardOutput GpuModel::forward_shard(GpuSequenceState& state, std::span<const int32_t> tokens,
                                         bool want_layer_streams, int64_t prompt_length, bool want_final_streams) {
  Workspace& s = *ws_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t start_pos = state.length;
  DSV4_CHECK(n > 0, "forward needs at least one token");
  DSV4_CHECK(start_pos + n <= max_len_, "positions ", start_pos, "..", start_pos + n - 1, " exceed ", max_len_);
  for (int32_t id : tokens)
    DSV4_CHECK(id >= 0 && id < config_.vocab_size, "token id ", id, " outside the vocabulary");
  const int hc = config_.hc_mult;
  const int64_t D = config_.hidden_size;
  int32_t* ids = grow(s.ids, n);
  CUDA_CHECK(cudaMemcpyAsync(ids, tokens.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  float* streams = grow(s.streams, n * hc * D);
  embed_rows(weights_->embed.get(), ids, n, hc, D, streams, stream_);
  const int64_t window_len = window_part(start_pos, n, prompt_length, config_.sliding_window);
  GpuForwardOutput out;
  for (int l = 0; l < config_.num_layers(); ++l) {
    block_forward(weights_->layers[l], l, state.layers[l], ids, start_pos, n, window_len, streams);
    if (want_layer_streams) {
      const size_t off = out.layer_streams.size();
      out.layer_streams.resize(off + hc * D);
      CUDA_CHECK(cudaMemcpyAsync(out.layer_streams.data() + off, streams + (n - 1) * hc * D,
                                 hc * D * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    }
  }
  state.length += n;
  out.logits = head_logits(streams + (n - 1) * hc * D, weights_->hc_head, weights_->norm.get());
  if (want_final_streams) {
    out.final_streams.resize(static_cast<size_t>(n * hc * D));
    CUDA_CHECK(cudaMemcpyAsync(out.final_streams.data(), streams, out.final_streams.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

std::vector<float> GpuModel::mtp_forward_shard(GpuSequenceState& state, std::span<const float> streams_in,
                                               std::span<const int32_t> next_ids, int64_t start_pos) {
  DSV4_CHECK(!weights_->mtp.empty(), "this model has no MTP block");
  Workspace& s = *ws_;
  const MtpW& m = weights_->mtp[0];
  const int hc = config_.hc_mult;
  const int64_t D = config_.hidden_size, n = static_cast<int64_t>(next_ids.size());
  const float eps = static_cast<float>(config_.rms_norm_eps);
  DSV4_CHECK(static_cast<int64_t>(streams_in.size()) == n * hc * D, "MTP input streams size");
  DSV4_CHECK(start_pos == state.mtp_length, "MTP call at position ", start_pos, " but its cache holds ",
             state.mtp_length);
  for (int32_t id : next_ids) DSV4_CHECK(id >= 0 && id < config_.vocab_size, "MTP token id ", id);
  int32_t* ids = grow(s.ids, n);
  CUDA_CHECK(cudaMemcpyAsync(ids, next_ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  float* in = grow(s.mtp_in, n * hc * D);
  CUDA_CHECK(cudaMemcpyAsync(in, streams_in.data(), n * hc * D * sizeof(float), cudaMemcpyHostToDevice, stream_));
  float* emb = grow(s.emb, n * D);
  float* embn = grow(s.embn, n * D);
  float* pe = grow(s.pe, n * D);
  float* hn = grow(s.hn, n * hc * D);
  float* ph = grow(s.ph, n * hc * D);
  uint8_t* qa = grow(s.qa, n * hc * D);
  float* sa = grow(s.sa, n * hc * D / 128);
  embed_rows(weights_->embed.get(), ids, n, 1, D, emb, stream_);
  rms_norm_rows(emb, m.enorm.get(), n, D, eps, embn, stream_);
  quantize_q8_rows(embn, n, D, qa, sa, stream_);
  lin8(qa, sa, n, 1, m.e_proj.w.get(), m.e_proj.s.get(), D, D, nullptr, pe, stream_);
  rms_norm_rows(in, m.hnorm.get(), n * hc, D, eps, hn, stream_);
  quantize_q8_rows(hn, n * hc, D, qa, sa, stream_);
  lin8(qa, sa, n * hc, 1, m.h_proj.w.get(), m.h_proj.s.get(), D, D, nullptr, ph, stream_);
  float* streams = grow(s.streams, n * hc * D);
  add_bf16(ph, pe, n * hc, D, hc, streams, stream_);
  const int layer = config_.num_layers();
  const int64_t window_len = window_part(start_pos, n, 0, config_.sliding_window);
  block_forward(m.block, layer, state.layers[layer], ids, start_pos, n, window_len, streams);
  state.mtp_length += n;
  return head_logits(streams + (n - 1) * hc * D, m.hc_head, m.norm.get());
}

}  // namespace dsv4::gpu
