#include "cpu/compressor.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/parallel.h"
#include "cpu/linear.h"
#include "numerics/formats.h"
#include "numerics/hadamard.h"
#include "numerics/quant.h"

namespace dsv4::cpu {

void compressor_state_shape(const CompressorWeights& w, int* slots, int* width) {
  const int c = w.overlap ? 2 : 1;
  *slots = c * w.ratio;
  *width = c * w.head_dim;
}

namespace {

// Softmax-weighted sum over `count` slots of one channel: Σ kv·softmax(score).
float pool_channel(const float* kv, const float* score, int count, int stride) {
  float m = -std::numeric_limits<float>::infinity();
  for (int s = 0; s < count; ++s) m = std::max(m, score[s * stride]);
  float sum = 0.0f;
  float e[256];
  for (int s = 0; s < count; ++s) {
    e[s] = std::exp(score[s * stride] - m);
    sum += e[s];
  }
  float out = 0.0f;
  for (int s = 0; s < count; ++s) out += kv[s * stride] * (e[s] / sum);
  return out;
}

// Pools the state into one entry of h channels (fp32).
void pool_state(const CompressorWeights& w, const CompressorStateRef& st, std::span<float> out) {
  const int r = w.ratio, h = w.head_dim;
  if (!w.overlap) {
    for (int c = 0; c < h; ++c) out[c] = pool_channel(&st.kv[c], &st.score[c], r, st.width);
    return;
  }
  // 2r slots: the previous window's A halves (channels [0, h)) then the current window's
  // B halves (channels [h, 2h)).
  float kv[8 * 2], sc[8 * 2];
  DSV4_CHECK(r <= 8, "overlap compressor supports ratio <= 8");
  for (int c = 0; c < h; ++c) {
    for (int s = 0; s < r; ++s) {
      kv[s] = st.kv[s * st.width + c];
      sc[s] = st.score[s * st.width + c];
      kv[r + s] = st.kv[(r + s) * st.width + h + c];
      sc[r + s] = st.score[(r + s) * st.width + h + c];
    }
    out[c] = pool_channel(kv, sc, 2 * r, 1);
  }
}

void finish_entry(const CompressorWeights& w, std::span<float> entry, int64_t position,
                  const numerics::RopeTable& rope, int rope_dim, float norm_eps,
                  CompressedKind kind) {
  for (float& v : entry) v = numerics::round_bf16(v);
  std::vector<float> normed(entry.size());
  rms_norm(entry, w.norm, norm_eps, normed);
  std::copy(normed.begin(), normed.end(), entry.begin());
  rope.apply(entry, position);
  if (kind == CompressedKind::kAttention) {
    numerics::simulate_q8(entry.first(entry.size() - rope_dim), 64);
  } else {
    numerics::hadamard_bf16(entry);
    numerics::simulate_q4(entry, 32);
  }
}

}  // namespace

void compress_tokens(const CompressorWeights& w, LayerState& layer, std::span<const float> x,
                     int64_t n, int64_t start_pos, const numerics::RopeTable& rope, int rope_dim,
                     float norm_eps, CompressedKind kind) {
  const bool indexer = kind == CompressedKind::kIndexer;
  const CompressorStateRef st = layer.compressor(indexer);
  auto entry_ptr = [&](int64_t e) {
    return indexer ? layer.index_key(e) : layer.compressed_entry(e);
  };
  const int r = w.ratio, h = w.head_dim, width = st.width;
  const int64_t d_model = w.wkv.in;
  // Projections of every token are independent: compute them in parallel first.
  std::vector<float> kv(static_cast<size_t>(n) * width), score(static_cast<size_t>(n) * width);
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      auto xt = x.subspan(t * d_model, d_model);
      w.wkv.forward(xt, std::span(kv).subspan(t * width, width));
      w.wgate.forward(xt, std::span(score).subspan(t * width, width));
    }
  });
  // Then the sequential state machine, token by token (identical for prefill and decode).
  std::vector<int64_t> produced;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = start_pos + t;
    const int slot_in_window = static_cast<int>(pos % r);
    const int row = w.overlap ? r + slot_in_window : slot_in_window;
    const float* ape = &w.ape[static_cast<size_t>(slot_in_window) * width];
    for (int c = 0; c < width; ++c) {
      st.kv[row * width + c] = kv[t * width + c];
      st.score[row * width + c] = score[t * width + c] + ape[c];
    }
    if ((pos + 1) % r != 0) continue;
    const int64_t entry = pos / r;
    pool_state(w, st, std::span(entry_ptr(entry), static_cast<size_t>(h)));
    produced.push_back(entry);
    if (w.overlap) {
      const size_t half = static_cast<size_t>(r) * width;
      std::copy_n(st.kv + half, half, st.kv);
      std::copy_n(st.score + half, half, st.score);
    }
  }
  // Post-process the new entries (independent of each other).
  parallel_for(static_cast<int64_t>(produced.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t entry = produced[static_cast<size_t>(i)];
      finish_entry(w, std::span(entry_ptr(entry), static_cast<size_t>(h)), entry * r, rope,
                   rope_dim, norm_eps, kind);
    }
  });
}

}  // namespace dsv4::cpu
