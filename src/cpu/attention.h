// Attention of one DeepSeek-V4 block on the CPU (spec §4.4): q/kv paths, window ring,
// compressor (CSA/HCA), lightning indexer (CSA), sparse attention with sink, inverse RoPE,
// grouped output projection.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpu/sequence_state.h"
#include "cpu/weights.h"
#include "numerics/rope.h"

namespace dsv4::cpu {

struct AttentionParams {
  int num_heads = 64;
  int head_dim = 512;
  int rope_dim = 64;
  int window = 128;
  int ratio = 0;  // 0 = window only, 4 = CSA, 128 = HCA (any r > 0 works; overlap iff r == 4)
  int o_groups = 8;
  int o_lora_rank = 1024;
  float norm_eps = 1e-6f;
  int index_heads = 64;
  int index_head_dim = 128;
  int index_topk = 512;
};

// Sparse attention of one query head over a candidate list, exactly as the reference
// kernel: blocks of 64 candidates in list order, online softmax (l = fma(l, α, Σp)),
// probabilities rounded to bf16 before P·V, sink only in the final denominator, bf16 out.
// candidates[j] == nullptr is an invalid (−1) slot. q, out: [head_dim].
void sparse_attention_head(std::span<const float> q, std::span<const float* const> candidates,
                           float sink, float softmax_scale, std::span<float> out);

// Length of the window part of every candidate list in a call (reference layout): a prefill
// of a prompt of length L (in one call, or chunked with every chunk told L) uses min(L, win);
// any other call uses win. The −1 padding only shifts where the compressed candidates start
// inside the kernel's 64-blocks, but that changes bf16 rounding, so chunked prefill keeps
// the one-shot layout and stays bit-identical.
int64_t window_part_length(int64_t start_pos, int64_t n, int64_t prompt_length, int window);

// Runs the block's attention for tokens at positions [start_pos, start_pos+n).
// x: [n, D] (after attn_norm) → out: [n, D]. Updates the layer cache (ring, compressed KV,
// indexer keys, compressor states). window_len from window_part_length().
void attention_forward(const AttentionWeights& w, const AttentionParams& p,
                       const numerics::RopeTable& rope, LayerState& cache,
                       std::span<const float> x, int64_t n, int64_t start_pos,
                       int64_t window_len, std::span<float> out);

}  // namespace dsv4::cpu
