// KV compressor on the CPU (spec §4.5): gated pooling of `ratio` tokens into one entry.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpu/sequence_state.h"
#include "cpu/weights.h"
#include "numerics/rope.h"

namespace dsv4::cpu {

enum class CompressedKind {
  kAttention,  // Q8-simulate the no-rope dims (block 64), as the window KV
  kIndexer,    // Hadamard, then Q4-simulate (block 32)
};

// Feeds tokens at positions [start_pos, start_pos+n) (x: [n, D] bf16 values) through the
// streaming state of `layer` (indexer or main compressor) and writes every completed entry
// (w is produced by the token at position r·(w+1)−1) to layer.index_key(w) resp.
// layer.compressed_entry(w). Post-processing: RMSNorm(bf16(pooled)), RoPE at position r·w
// with `rope`, then `kind`'s quantization.
void compress_tokens(const CompressorWeights& w, LayerState& layer, std::span<const float> x,
                     int64_t n, int64_t start_pos, const numerics::RopeTable& rope, int rope_dim,
                     float norm_eps, CompressedKind kind);

// State shape (slots, width) of a compressor with these weights.
void compressor_state_shape(const CompressorWeights& w, int* slots, int* width);

}  // namespace dsv4::cpu
