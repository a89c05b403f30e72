// GpuModel's forward (prefill) attention: n query rows at consecutive positions start_pos.. of
// one sequence, step for step the CPU reference's order (cpu/attention.cpp, indexer.cpp).
// The indexer scores + top-k and the sparse attention run on the plain kernels (ops.h;
// bit-identical to the reference's arithmetic) or, when the model chose the sm_90a decode path
// (attn_path_ == kSm90, decode_ops.h choose_decode_attn_path; DSV4_GPU_ATTN=reference and
// GpuModelOptions::plain_decode_attention force the plain one), on the tensor-core kernels of
// sm90_indexer_topk.h / sparse_decode.h with one row per query position (tolerance-equal).
#include <algorithm>
#include <cmath>
#include <string>

#include "base/check.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_model_workspace.h"
#include "gpu/kv_fp8.h"
#include "gpu/ops.h"
#include "gpu/profiler.h"
#include "gpu/sm90_indexer_topk.h"
#include "gpu/sparse_decode.h"

namespace dsv4::gpu {

void GpuModel::attention(const AttentionW& w,
                         int ratio,
                         GpuLayerCache& cache,
                         const float* x,
                         XQ8 xq,
                         int64_t n,
                         int64_t start_pos,
                         int64_t window_len,
                         float* out) {
  Workspace& s = *active_ws_;
  const model::ModelConfig& c = config_;
  const int64_t D = c.hidden_size, H = local_heads(), d = c.head_dim, ql = c.q_lora_rank;
  const int rd = c.qk_rope_head_dim, pairs = rd / 2, win = c.sliding_window;
  const float* rope = ratio > 0 ? rope_compress_.get() : rope_window_.get();
  const bool sm90 = attn_path_ == DecodeAttnPath::kSm90;
  // 1. q and window-KV paths.
  const QkvRows p = project_qkv(w, x, xq, n, RowPositions{.pos0 = start_pos}, rope, nullptr);
  uint8_t* qa = p.qa;
  float* sa = p.sa;
  float* q = p.q;
  float* kv = p.kv;
  DSV4_CHECK(start_pos + n <= max_len_,
             "positions up to ",
             start_pos + n,
             " exceed the GPU state's ",
             max_len_);
  int32_t* pos = nullptr;  // sm_90a: the rows' positions [n]
  if (sm90) {
    pos = grow(s.prefill_pos, n);
    fill_positions(pos, n, start_pos, stream_);
  }

  // 2. Compressed entries and the indexer's choices.
  SparseAttnArgs a;
  if (ratio > 0) {
    if (w.indexer) {
      const IndexerW& ix = *w.indexer;
      const int HI = c.index_n_heads, dh = c.index_head_dim;
      compress(ix.compressor,
               cache.index_kv.get(),
               cache.index_score.get(),
               x,
               n,
               start_pos,
               cache.index_keys.get(),
               nullptr);
      float* iq = grow(s.iq, n * HI * dh);
      float* iw = grow(s.iw, n * HI);
      lin8(qa,
           sa,
           n,
           1,
           ix.wq_b.w.get(),
           ix.wq_b.s.get(),
           int64_t{HI} * dh,
           ql,
           nullptr,
           iq,
           stream_);
      rope_hadamard_q4_rows(iq, n * HI, dh, rope, pairs, RowPositions{.pos0 = start_pos, .rows_per_pos = HI}, stream_);
      const float wscale =
          static_cast<float>(std::pow(static_cast<double>(dh), -0.5) * std::pow(HI, -0.5));
      dense_linear(x,
                   n,
                   D,
                   ix.weights_proj.w.get(),
                   ix.weights_proj.bf16,
                   HI,
                   D,
                   0,
                   true,
                   wscale,
                   iw,
                   stream_);
      int32_t* sel = grow(s.sel, n * c.index_topk);
      int32_t* cnt = grow(s.sel_count, n);
      if (sm90) {
        prefill_index_sm90(iq, iw, n, start_pos, pos, ratio, cache.index_keys.get(), sel, cnt);
      } else {
        const int64_t stride = std::max<int64_t>(1, (start_pos + n) / ratio);
        float* scores = grow(s.scores, n * stride);
        index_scores(
            iq, iw, cache.index_keys.get(), n, start_pos, ratio, HI, dh, scores, stride, stream_);
        index_topk(scores, n, start_pos, ratio, stride, c.index_topk, sel, cnt, stream_);
      }
      a.selected = sel;
      a.sel_count = cnt;
      a.sel_stride = c.index_topk;
    }
    compress(*w.compressor,
             cache.comp_kv.get(),
             cache.comp_score.get(),
             x,
             n,
             start_pos,
             nullptr,
             cache.compressed.get());
  }
  // 3. Sparse attention, 4. ring update.
  float* attn = grow(s.attn, n * H * d);
  DSV4_CHECK(window_len >= std::min<int64_t>(start_pos + n, win) && window_len <= win,
             "window part length ",
             window_len);
  a.q = q;
  a.kv_new = kv;
  a.ring = cache.window.get();
  a.compressed = cache.compressed.get();
  a.sink = w.sink.get();
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  a.H = static_cast<int>(H);
  a.d = static_cast<int>(d);
  a.win = win;
  a.ratio = ratio;
  a.n = n;
  a.start_pos = start_pos;
  a.window_len = window_len;
  a.out = attn;
  if (sm90)
    prefill_attend_sm90(a, pos);
  else
    sparse_attention(a, stream_);
  window_ring_update(kv, n, start_pos, win, static_cast<int>(d), cache.window.get(), stream_);
  // 5. Inverse RoPE, grouped wo_a (bf16), wo_b (FP8).
  rope_rows(attn, n * H, d, H, start_pos, 1, rope, pairs, true, stream_);
  output_projection(w, attn, n, qa, sa, out);
}

void GpuModel::prefill_index_sm90(const float* iq,
                                  const float* iw,
                                  int64_t n,
                                  int64_t start_pos,
                                  const int32_t* pos,
                                  int ratio,
                                  const uint16_t* keys,
                                  int32_t* sel,
                                  int32_t* cnt) {
  Workspace& s = *active_ws_;
  const model::ModelConfig& c = config_;
  const int HI = c.index_n_heads, dh = c.index_head_dim, k = c.index_topk;
  DSV4_CHECK(dh == sm90::kIndexDim, "sm90 indexer: head dim ", dh);
  // Rows per call: the score-key scratch (rows × visible × 2 B) stays ≤ 64 MiB, and the
  // score grid's y dimension ≤ 65535.
  const int64_t all_visible = (start_pos + n) / ratio;
  const int64_t chunk =
      std::clamp<int64_t>((int64_t{1} << 25) / std::max<int64_t>(1, all_visible), 64, 65535);
  const int64_t first_rows = std::min(n, chunk);
  uint8_t* ws = grow(s.index_ws,
                     static_cast<int64_t>(sm90::indexer_workspace_bytes(
                         static_cast<int>(first_rows), static_cast<int>(all_visible))));
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t rows = std::min(chunk, n - t0);
    const int64_t max_visible = (start_pos + t0 + rows) / ratio;
    sm90::IndexerArgs ia;
    ia.q_f32 = iq + t0 * HI * dh;
    ia.heads = HI;
    ia.weights = iw + t0 * HI;
    ia.keys = reinterpret_cast<const __nv_bfloat16*>(keys);  // one pool: key_base null
    ia.pos = pos + t0;
    ia.ratio = ratio;
    ia.rows = static_cast<int>(rows);
    ia.max_visible = static_cast<int>(max_visible);
    ia.k = k;
    ia.topk = sel + t0 * k;
    ia.count = cnt + t0;
    // Bytes: every row's visible keys as bf16 (L2-resident after the first rows) and its q.
    const double mean_visible = 0.5 * double((start_pos + t0) / ratio + max_visible);
    prof::Launch pl(
        "sm90_prefill_index_topk",
        double(rows) * (mean_visible * dh * 2 + HI * (dh + 1) * 4.0),
        stream_,
        [&] { return "rows=" + std::to_string(rows) + " keys<=" + std::to_string(max_visible); });
    sm90::indexer_topk(ia, ws, stream_);
  }
}

void GpuModel::prefill_attend_sm90(const SparseAttnArgs& a, const int32_t* pos) {
  Workspace& s = *active_ws_;
  DSV4_CHECK(a.d == kKvDim, "head_dim ", a.d, ": the FP8 KV caches hold ", kKvDim, "-wide entries");
  const int64_t n = a.n, win = a.win;
  // Linear window pool: positions base .. start_pos + n − 1 (entry p − base); the ones before
  // start_pos are the ring's (slot p % win), decoded and re-encoded exactly (the stored values
  // are Q8-simulated), then this call's rows.
  const int64_t base = std::max<int64_t>(0, a.start_pos - win + 1), old_rows = a.start_pos - base;
  uint8_t* pool = grow(s.prefill_window, kv_cache_bytes(old_rows + n));
  if (old_rows > 0) {
    float* tmp = grow(s.prefill_ring_rows, old_rows * a.d);
    const int64_t slot0 = base % win, first_part = std::min(old_rows, win - slot0);
    kv_decode_rows(a.ring, slot0, first_part, tmp, stream_);
    kv_decode_rows(a.ring, 0, old_rows - first_part, tmp + first_part * a.d, stream_);
    kv_encode_rows(tmp, old_rows, pool, 0, stream_);
  }
  kv_encode_rows(a.kv_new, n, pool, old_rows, stream_);

  const int64_t max_extra = a.ratio == 0            ? 0
                            : a.selected != nullptr ? a.sel_stride
                                                    : (a.start_pos + n) / a.ratio;
  const int rows = static_cast<int>(n);
  const sm90::SparseDecodePlan plan =
      sm90::plan_sparse_decode(rows, a.win, static_cast<int>(max_extra), num_sms_, 16, a.H, rows);
  sm90::SparseDecodeArgs g;
  g.q_f32 = a.q;
  g.heads = a.H;
  g.main_pool = kv_cache_pool(pool);
  g.pos = pos;
  g.win = a.win;
  g.window_origin = static_cast<int>(base);
  g.extra_pool = kv_cache_pool(const_cast<uint8_t*>(a.compressed));
  if (a.ratio > 0) {
    if (a.selected != nullptr) {
      g.extra_idx = a.selected;
      g.extra_len = a.sel_count;
      g.extra_stride = a.sel_stride;
    } else {
      g.extra_ratio = a.ratio;
    }
  }
  g.sink = a.sink;
  g.scale = a.scale;
  g.out_f32 = a.out;
  g.rows = rows;
  uint8_t* ws = grow(s.attn_ws, static_cast<int64_t>(plan.workspace_bytes));
  // Bytes: q and out (fp32) per row and the upper bound of candidate entries gathered.
  prof::Launch pl(
      a.ratio == 0 ? "sm90_prefill_attention (window)"
      : a.selected ? "sm90_prefill_attention (CSA)"
                   : "sm90_prefill_attention (HCA)",
      double(n) * (double(std::min<int64_t>(win, a.start_pos + n) + max_extra) * kKvEntryBytes +
                   2.0 * a.H * a.d * 4),
      stream_,
      [&] {
        return "rows=" + std::to_string(n) + " H=" + std::to_string(a.H) +
               " splits=" + std::to_string(plan.splits);
      });
  sm90::sparse_decode(g, plan, ws, stream_);
}

}  // namespace dsv4::gpu
