// GpuModel batched decode and its CUDA graphs: the single-token forward of gpu_model.cpp run
// once over B rows (one per sequence). Per-token steps (hc pre/post, norms, Q8, Lin8, dense
// linears, routing, MoE, LM head) are the same launchers with n = B; the position-dependent
// steps (RoPE, compressor, indexer, sparse attention, ring update) are the decode_ops.h kernels
// reading positions and cache pointers from the step's device arrays. The arithmetic is
// attention()/compress()'s (the compressors and the indexer's scan of a compressed layer run on a
// side stream, forked after the mHC pre step and joined before the attention: they touch nothing
// the q path writes, and read the indexer's queries only after an event), so every row equals
// forward() bit for bit on the plain attention path; on the sm_90a path (decode_index /
// decode_attend dispatch, chosen at load) the indexer and attention are tensor-core kernels
// equal within their tolerance, and
// their split-K is planned for the padded graph size so graph replay equals eager decode.
// Also fill_for_benchmark (random decode state: FP8 caches filled through kv_encode_rows).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "base/check.h"
#include "base/env.h"
#include "gpu/decode_ops.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_model_workspace.h"
#include "gpu/kv_fp8.h"
#include "gpu/ops.h"
#include "gpu/pdl.h"

namespace dsv4::gpu {
namespace {

// The side branch of decode (GpuModel::side_) for batches of up to 16 rows (H200, TP1
// Flash, 20 layers, its first form: B = 1 / 8 / 16 -7.0 / -4.9 / -1.4 %, B = 32 within the
// noise, B = 64 +1.6 %), unless DSV4_DECODE_BRANCH=0.
constexpr int64_t kDecodeBranchMaxRows = 16;
bool decode_branch_enabled() {
  static const bool on = env_switch_on("DSV4_DECODE_BRANCH");
  return on;
}

template <class F>
struct ScopeExit {
  F f;
  ~ScopeExit() { f(); }
};
template <class F>
ScopeExit(F) -> ScopeExit<F>;

// Byte layout of Workspace::decode_in for `rows` rows:
// [caches: layers·rows DecodeLayerCache][pos: rows int32][ids: rows int32].
struct DecodeInputLayout {
  size_t caches = 0, pos = 0, ids = 0, bytes = 0;
};
DecodeInputLayout decode_input_layout(int64_t layers, int64_t rows) {
  DecodeInputLayout l;
  l.pos = static_cast<size_t>(layers * rows) * sizeof(DecodeLayerCache);
  l.ids = l.pos + static_cast<size_t>(rows) * sizeof(int32_t);
  l.bytes = l.ids + static_cast<size_t>(rows) * sizeof(int32_t);
  return l;
}

DecodeLayerCache layer_cache(GpuLayerCache& c) {
  DecodeLayerCache r;
  r.window = c.window.get();
  r.comp = {.state_kv = c.comp_kv.get(), .state_score = c.comp_score.get(), .cache = c.compressed.get()};
  r.index = {.state_kv = c.index_kv.get(), .state_score = c.index_score.get(), .keys = c.index_keys.get()};
  return r;
}

}  // namespace

void GpuModel::fill_for_benchmark(GpuSequenceState& state, int64_t length, uint64_t seed) {
  DSV4_CHECK(state.length == 0 && length >= 1 && length < max_len_, "fill_for_benchmark: fresh state and 1 <= ",
             length, " < ", max_len_);
  constexpr int64_t kChunk = 4096;  // FP8 caches: random fp32 rows encoded chunk by chunk
  auto fill_one = [&](GpuSequenceState& st) {
    uint64_t k = seed;
    DeviceBuffer<float> rows(static_cast<size_t>(kChunk * kKvDim));  // one allocation for all chunks
    float* r = rows.get();
    for (GpuLayerCache& c : st.layers) {
      for (DeviceBuffer<uint8_t>* b : {&c.window, &c.compressed}) {
        const int64_t entries = static_cast<int64_t>(b->size()) / kKvCachePageStride * kKvCachePage;
        for (int64_t e0 = 0; e0 < entries; e0 += kChunk) {
          const int64_t count = std::min(kChunk, entries - e0);
          fill_random_f32(r, count * kKvDim, 1.0f, 0.0f, ++k, nullptr);
          kv_encode_rows(r, count, b->get(), e0, nullptr);
        }
      }
      if (c.index_keys.size() > 0)
        fill_random_bf16(c.index_keys.get(), static_cast<int64_t>(c.index_keys.size()), 1.0f, 0.0f, ++k, nullptr);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    st.length = length;
  };
  check_peer_states(state);
  on_ranks([&](GpuModel&, int r) { fill_one(shard_state(state, r)); });
}

int64_t GpuModel::attn_split_rows(int64_t n) const {
  if (!graph_sizes_.empty() && n <= graph_sizes_.back())
    return *std::lower_bound(graph_sizes_.begin(), graph_sizes_.end(), static_cast<int>(n));
  return n;
}

std::vector<int> GpuModel::decode_graph_batch_sizes(int max_bs) {
  std::vector<int> sizes;
  for (int b : {1, 2, 4, 8, 12, 16, 24, 32})
    if (b <= max_bs) sizes.push_back(b);
  for (int b = 40; b <= max_bs; b += 8) sizes.push_back(b);
  if (max_bs > 0 && sizes.back() != max_bs) sizes.push_back(max_bs);
  return sizes;
}

void GpuModel::enable_decode_graphs_shard(int max_bs) {
  DSV4_CHECK(max_bs <= 256, "--cuda-graph-max-bs ", max_bs, " above 256 is not supported");
  release_decode_graphs();
  graph_sizes_ = max_bs > 0 ? decode_graph_batch_sizes(max_bs) : std::vector<int>{};
  graph_ws_.reset();
  graph_ws_ready_ = false;
}

void GpuModel::release_decode_graphs() {
  for (auto& g : graphs_)
    if (g->exec != nullptr) cudaGraphExecDestroy(g->exec);
  graphs_.clear();
}

int GpuModel::decode_graphs_captured() const { return static_cast<int>(graphs_.size()); }

double GpuModel::capture_decode_graphs_shard() {
  const auto t0 = std::chrono::steady_clock::now();
  for (int b : graph_sizes_) {
    const bool have = std::any_of(graphs_.begin(), graphs_.end(), [&](const auto& g) { return g->batch == b; });
    if (!have) capture_decode_graph(b);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

GpuModel::DecodeStep GpuModel::stage_decode_inputs(Workspace& ws, std::span<GpuSequenceState* const> seqs,
                                                   std::span<const int32_t> tokens, int64_t rows, bool graph_bounds) {
  const int64_t L = config_.num_layers(), B = static_cast<int64_t>(seqs.size());
  DSV4_CHECK(rows >= B && (rows == B || pad_seq_ != nullptr), "decode rows ", rows, " for ", B, " sequences");
  const DecodeInputLayout layout = decode_input_layout(L, rows);
  decode_staging_.resize(layout.bytes);
  auto* caches = reinterpret_cast<DecodeLayerCache*>(decode_staging_.data() + layout.caches);
  auto* pos = reinterpret_cast<int32_t*>(decode_staging_.data() + layout.pos);
  auto* ids = reinterpret_cast<int32_t*>(decode_staging_.data() + layout.ids);
  int64_t max_pos = 0;
  for (int64_t r = 0; r < rows; ++r) {
    GpuSequenceState& seq = r < B ? *seqs[r] : *pad_seq_;  // padding rows: position 0, token 0
    pos[r] = r < B ? static_cast<int32_t>(seq.length) : 0;
    ids[r] = r < B ? tokens[r] : 0;
    max_pos = std::max<int64_t>(max_pos, pos[r]);
    for (int64_t l = 0; l < L; ++l) caches[l * rows + r] = layer_cache(seq.layers[l]);
  }
  uint8_t* dev = grow(ws.decode_in, static_cast<int64_t>(layout.bytes));
  CUDA_CHECK(cudaMemcpyAsync(dev, decode_staging_.data(), layout.bytes, cudaMemcpyHostToDevice, stream_));
  DecodeStep step;
  step.rows = rows;
  step.caches = reinterpret_cast<const DecodeLayerCache*>(dev + layout.caches);
  step.pos = reinterpret_cast<const int32_t*>(dev + layout.pos);
  step.ids = reinterpret_cast<const int32_t*>(dev + layout.ids);
  step.pos_bound = graph_bounds ? max_len_ : max_pos + 1;
  return step;
}

void GpuModel::decode_shard(std::span<GpuSequenceState* const> seqs, std::span<const int32_t> tokens,
                            std::span<float> logits, DecodeMode mode, const DecodeSampling* sampling) {
  const int64_t B = static_cast<int64_t>(seqs.size()), V = config_.vocab_size;
  DSV4_CHECK(B > 0 && B <= 65535, "decode needs 1..65535 sequences, got ", B);
  DSV4_CHECK(static_cast<int64_t>(tokens.size()) == B, "decode: ", tokens.size(), " tokens for ", B, " sequences");
  DSV4_CHECK(logits.empty() || static_cast<int64_t>(logits.size()) == B * V, "decode: logits buffer has ",
             logits.size(), " floats, needs ", B * V);
  for (int64_t b = 0; b < B; ++b) {
    const GpuSequenceState* s = seqs[b];
    DSV4_CHECK(s != nullptr && static_cast<int>(s->layers.size()) >= config_.num_layers(), "decode: sequence ", b,
               " has no state");
    DSV4_CHECK(s->length > 0, "decode: sequence ", b, " is not prefilled");
    DSV4_CHECK(s->length + 1 <= max_len_, "decode: position ", s->length, " exceeds ", max_len_);
    DSV4_CHECK(tokens[b] >= 0 && tokens[b] < V, "token id ", tokens[b], " outside the vocabulary");
  }
  std::vector<const GpuSequenceState*> sorted(seqs.begin(), seqs.end());
  std::sort(sorted.begin(), sorted.end());
  DSV4_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "decode: a sequence appears twice");

  DecodeGraph* graph = nullptr;
  if (mode == DecodeMode::kAuto && !graph_sizes_.empty() && B <= graph_sizes_.back()) {
    const int size = *std::lower_bound(graph_sizes_.begin(), graph_sizes_.end(), static_cast<int>(B));
    const auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const auto& g) { return g->batch == size; });
    graph = it != graphs_.end() ? it->get() : &capture_decode_graph(size);
  }
  const float* dev_logits = nullptr;
  if (graph != nullptr) {
    stage_decode_inputs(*graph_ws_, seqs, tokens, graph->batch, true);
    CUDA_CHECK(cudaGraphLaunch(graph->exec, stream_));
    dev_logits = graph_ws_->head_logits.get();
  } else {
    decode_pass(stage_decode_inputs(*ws_, seqs, tokens, B, false));
    dev_logits = ws_->head_logits.get();
  }
  if (sampling != nullptr && !logits.empty()) {
    DSV4_CHECK(static_cast<int64_t>(sampling->params.size()) == B && static_cast<int64_t>(sampling->results.size()) == B,
               "decode: sampling needs ", B, " params and results");
    sample_params_.reserve(static_cast<size_t>(B));
    sample_results_.reserve(static_cast<size_t>(B));
    sample_scratch_.reserve(static_cast<size_t>(B * V));
    CUDA_CHECK(cudaMemcpyAsync(sample_params_.get(), sampling->params.data(), static_cast<size_t>(B) * sizeof(SampleParams),
                               cudaMemcpyHostToDevice, stream_));
    sample_rows(dev_logits, B, V, sample_params_.get(), sample_results_.get(), sample_scratch_.get(), stream_);
    CUDA_CHECK(cudaMemcpyAsync(sampling->results.data(), sample_results_.get(), static_cast<size_t>(B) * sizeof(SampleResult),
                               cudaMemcpyDeviceToHost, stream_));
    for (int64_t b = 0; b < B; ++b) {  // rows left to the host sampler
      if (sampling->params[b].on_device) continue;
      CUDA_CHECK(cudaMemcpyAsync(logits.data() + b * V, dev_logits + b * V, static_cast<size_t>(V) * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_));
    }
  } else if (!logits.empty()) {
    CUDA_CHECK(cudaMemcpyAsync(logits.data(), dev_logits, static_cast<size_t>(B * V) * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (GpuSequenceState* s : seqs) s->length += 1;
}

GpuModel::DecodeGraph& GpuModel::capture_decode_graph(int batch) {
  DSV4_CHECK(!graph_sizes_.empty() && batch <= graph_sizes_.back(), "decode graph batch ", batch);
  if (pad_seq_ == nullptr) pad_seq_ = std::make_unique<GpuSequenceState>(new_sequence_for(1));
  Workspace* const saved = active_ws_;
  ScopeExit restore{[&] { active_ws_ = saved; }};
  if (!graph_ws_ready_) {
    // Size every graph buffer for the largest batch (and build the MoE's lazily made tables)
    // with one eager pass of padding rows, so no capture ever allocates.
    graph_ws_ = std::make_unique<Workspace>();
    active_ws_ = graph_ws_.get();
    decode_pass(stage_decode_inputs(*graph_ws_, {}, {}, graph_sizes_.back(), true));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    graph_ws_ready_ = true;
  }
  active_ws_ = graph_ws_.get();
  const DecodeStep step = stage_decode_inputs(*graph_ws_, {}, {}, batch, true);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    decode_pass(step);
  } catch (...) {
    cudaStreamEndCapture(stream_, &g);
    if (g != nullptr) cudaGraphDestroy(g);
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
  auto dg = std::make_unique<DecodeGraph>();
  dg->batch = batch;
  const cudaError_t e = cudaGraphInstantiate(&dg->exec, g, 0);
  cudaGraphDestroy(g);
  CUDA_CHECK(e);
  CUDA_CHECK(cudaGraphUpload(dg->exec, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  const auto pos = std::lower_bound(graphs_.begin(), graphs_.end(), batch,
                                    [](const auto& x, int b) { return x->batch < b; });
  return **graphs_.insert(pos, std::move(dg));
}

void GpuModel::decode_pass(const DecodeStep& step) {
  const PdlScope pdl(step.rows <= pdl_max_rows());  // small batches: overlap the kernels' launches
  Workspace& s = *active_ws_;
  const int hc = config_.hc_mult;
  const int64_t D = config_.hidden_size, n = step.rows;
  float* streams = grow(s.streams, n * hc * D);
  embed_rows(weights_->embed.get(), step.ids, n, hc, D, streams, stream_);
  for (int l = 0; l < config_.num_layers(); ++l) block_decode(weights_->layers[l], l, step, streams);
  head_logits_rows(streams, n, weights_->hc_head, weights_->norm.get());
}

void GpuModel::block_decode(const BlockW& w, int layer, const DecodeStep& step, float* streams) {
  const int ratio = config_.compress_ratio(layer);
  block(w, layer, step.ids, step.rows, streams, [&](const float* x, XQ8 xq, float* out) {
    attention_decode(w.attn, layer, ratio, step, x, xq, out);
  });
}

void GpuModel::compress_decode(const CompressorW& w, int layer, const DecodeStep& step, const float* pkv,
                               const float* psc, bool indexer, cudaStream_t s) {
  const int64_t n = step.rows;
  DecodeCompressorArgs a;
  a.kv = pkv;
  a.score = psc;
  a.ape = w.ape.get();
  a.norm = w.norm.get();
  a.rope_table = rope_compress_.get();
  a.pairs = config_.qk_rope_head_dim / 2;
  a.eps = static_cast<float>(config_.rms_norm_eps);
  a.ratio = w.ratio;
  a.h = w.head_dim;
  a.overlap = w.overlap;
  a.indexer = indexer;
  decode_compressor(a, n, step.pos, step.caches + layer * n, s);
}

float* GpuModel::compressors_decode(const AttentionW& w, int layer, const DecodeStep& step, const float* x,
                                    cudaStream_t s) {
  Workspace& ws = *active_ws_;
  const model::ModelConfig& c = config_;
  const int64_t D = c.hidden_size, n = step.rows;
  const CompressorW& cw = *w.compressor;
  const int64_t width = (cw.overlap ? 2 : 1) * int64_t{cw.head_dim};
  float* pkv = grow(ws.cproj_kv, n * width);
  float* psc = grow(ws.cproj_sc, n * width);
  DenseOut outs[5] = {{.w = cw.wkv.w.get(), .w_bf16 = cw.wkv.bf16, .out = width, .y = pkv},
                      {.w = cw.wgate.w.get(), .w_bf16 = cw.wgate.bf16, .out = width, .y = psc}};
  int nout = 2;
  float *ipkv = nullptr, *ipsc = nullptr, *iw = nullptr;
  if (w.indexer) {
    const IndexerW& ix = *w.indexer;
    const CompressorW& icw = ix.compressor;
    const int HI = c.index_n_heads, dh = c.index_head_dim;
    const int64_t iwidth = (icw.overlap ? 2 : 1) * int64_t{icw.head_dim};
    ipkv = grow(ws.iproj_kv, n * iwidth);
    ipsc = grow(ws.iproj_sc, n * iwidth);
    iw = grow(ws.iw, n * HI);
    const float wscale = static_cast<float>(std::pow(static_cast<double>(dh), -0.5) * std::pow(HI, -0.5));
    outs[nout++] = {.w = icw.wkv.w.get(), .w_bf16 = icw.wkv.bf16, .out = iwidth, .y = ipkv};
    outs[nout++] = {.w = icw.wgate.w.get(), .w_bf16 = icw.wgate.bf16, .out = iwidth, .y = ipsc};
    outs[nout++] = {.w = ix.weights_proj.w.get(), .w_bf16 = ix.weights_proj.bf16, .out = HI, .y = iw,
                    .round_bf16 = true, .post_scale = wscale};
  }
  dense_linear_multi(x, n, D, std::span<const DenseOut>(outs, size_t(nout)), s);
  if (w.indexer) compress_decode(w.indexer->compressor, layer, step, ipkv, ipsc, true, s);
  compress_decode(cw, layer, step, pkv, psc, false, s);
  return iw;
}

void GpuModel::attention_decode(const AttentionW& w, int layer, int ratio, const DecodeStep& step, const float* x,
                                XQ8 xq, float* out) {
  Workspace& s = *active_ws_;
  const model::ModelConfig& c = config_;
  const int64_t H = local_heads(), d = c.head_dim, ql = c.q_lora_rank, n = step.rows;
  const int rd = c.qk_rope_head_dim, pairs = rd / 2, win = c.sliding_window;
  const float* rope = ratio > 0 ? rope_compress_.get() : rope_window_.get();
  const DecodeLayerCache* caches = step.caches + layer * n;
  // 1. The compressors (their projections of x, the indexer's and the attention's compressor
  // steps): on the side stream when the branch is on, under step 2. They write only their own
  // projections and the layers' compressed caches, which the q path does not touch.
  const bool branch = ratio > 0 && n <= kDecodeBranchMaxRows && decode_branch_enabled();
  cudaStream_t cs = branch ? side_.stream() : stream_;
  if (branch) side_.order(stream_, cs);  // fork
  float* iw = ratio > 0 ? compressors_decode(w, layer, step, x, cs) : nullptr;
  // 2. q and window-KV paths (attention()'s, RoPE at each row's own position), with the
  // indexer's queries from qa right after q_norm's Q8, on the model stream (the side stream's scan
  // is ordered after them). Without an indexer the side chain is short: the window-KV row (and
  // ring) launch goes there, once wkv's output is written (docs/decode-step.md).
  const int HI = c.index_n_heads, dh = c.index_head_dim;
  float* iq = nullptr;
  std::function<void(uint8_t*, float*)> index_queries;
  if (ratio > 0 && w.indexer) {
    index_queries = [&](uint8_t* qa_rows, float* sa_rows) {
      iq = grow(s.iq, n * HI * dh);
      lin8(qa_rows, sa_rows, n, 1, w.indexer->wq_b.w.get(), w.indexer->wq_b.s.get(), int64_t{HI} * dh, ql, nullptr,
           iq, stream_);
      rope_hadamard_q4_rows(iq, n * HI, dh, rope, pairs, RowPositions{.positions = step.pos, .rows_per_pos = HI},
                            stream_);
      if (branch) side_.order(stream_, cs);
    };
  }
  const bool ring_here = attn_path_ == DecodeAttnPath::kSm90;  // its attention reads the ring after the update
  const QkvRows p = project_qkv(w, x, xq, n, RowPositions{.positions = step.pos}, rope, ring_here ? caches : nullptr,
                                index_queries, branch && !w.indexer ? &side_ : nullptr);
  uint8_t* qa = p.qa;
  float* sa = p.sa;
  float* q = p.q;
  float* kv = p.kv;
  // 3. The indexer's scan of its compressed keys (on the side stream once its queries are done).
  DecodeAttnArgs a;
  if (ratio > 0 && w.indexer) {
    const int64_t max_visible = step.pos_bound / ratio;
    uint8_t* iws = grow(s.index_ws, static_cast<int64_t>(decode_index_workspace_bytes(attn_path_, n, max_visible)));
    int32_t* sel = grow(s.sel, n * c.index_topk);
    int32_t* cnt = grow(s.sel_count, n);
    decode_index(attn_path_, iq, iw, n, step.pos, caches, ratio, HI, dh, max_visible, c.index_topk, sel, cnt, iws, cs);
    a.selected = sel;
    a.sel_count = cnt;
    a.sel_stride = c.index_topk;
  }
  if (branch) side_.order(cs, stream_);  // join
  // 4. Sparse attention (window part = the whole window, as forward() for start_pos > 0),
  // 5. ring update.
  float* attn = grow(s.attn, n * H * d);
  a.q = q;
  a.kv_new = kv;
  a.sink = w.sink.get();
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  a.H = static_cast<int>(H);
  a.d = static_cast<int>(d);
  a.win = win;
  a.ratio = ratio;
  a.out = attn;
  a.ring_written = ring_here;
  // Split-K bounds from max_len (not this step's positions) and the padded graph size, so
  // eager decode and graph replay run the same plan.
  const int64_t split_rows = attn_split_rows(n);
  const int64_t max_extra = ratio == 0 ? 0 : a.selected != nullptr ? a.sel_stride : max_len_ / ratio;
  uint8_t* aws =
      grow(s.attn_ws, static_cast<int64_t>(decode_attend_workspace_bytes(attn_path_, split_rows, a.H, num_sms_)));
  decode_attend(attn_path_, a, n, split_rows, max_extra, num_sms_, step.pos, caches, aws, stream_);
  // 6. Inverse RoPE, grouped wo_a (bf16 arithmetic), wo_b (FP8). An FP8-stored wo_a takes attn
  // as bf16 too, written by the inverse RoPE's launch (no x conversion per output tile).
  if (w.wo_a.fp8() && n <= kDenseFp8MaxRows) {
    uint16_t* attn16 = grow(s.attn16, n * H * d);
    int32_t* exact = grow(s.attn16_exact, n * ((H * d + kBf16CopyFlagValues - 1) / kBf16CopyFlagValues));
    decode_rope_inverse_bf16(attn, n, static_cast<int>(H), static_cast<int>(d), step.pos, rope, pairs, attn16, exact,
                            stream_);
    output_projection(w, attn, n, qa, sa, out, attn16, exact);
    return;
  }
  decode_rope_rows(attn, n * H, d, H, step.pos, rope, pairs, true, stream_);
  output_projection(w, attn, n, qa, sa, out);
}

}  // namespace dsv4::gpu
