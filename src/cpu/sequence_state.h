// Per-sequence state of the CPU reference backend (spec §5.1), dense and growable.
//
// One LayerCache per trunk layer plus one per MTP block. Values are bf16 numbers held in
// floats (compressor states are true fp32). Owned by the caller; one thread at a time.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace dsv4::cpu {

// Streaming state of one compressor (spec §4.5): `slots` rows of `width` fp32 values.
// Overlap (r = 4): slots = 2r, width = 2h (rows 0..r−1 = previous window, r..2r−1 = current).
// Non-overlap: slots = r, width = h. Scores are stored with `ape` already added.
struct CompressorState {
  int slots = 0;
  int width = 0;
  std::vector<float> kv;     // [slots, width], initially 0
  std::vector<float> score;  // [slots, width], initially −inf
  void reset(int num_slots, int row_width) {
    slots = num_slots;
    width = row_width;
    kv.assign(static_cast<size_t>(slots) * width, 0.0f);
    score.assign(static_cast<size_t>(slots) * width, -std::numeric_limits<float>::infinity());
  }
};

struct LayerCache {
  std::vector<float> window;      // [sliding_window, head_dim]: slot p % window holds position p
  std::vector<float> compressed;  // [num_entries, head_dim], entry w covers tokens r·w .. r·w+r−1
  std::vector<float> index_keys;  // [num_entries, index_head_dim] (ratio-4 layers)
  CompressorState compressor;
  CompressorState index_compressor;
};

struct SequenceState {
  std::vector<LayerCache> layers;  // trunk layers, then MTP blocks
  int64_t length = 0;              // positions already processed by the trunk
  int64_t mtp_length = 0;          // positions already processed by MTP block 0
};

}  // namespace dsv4::cpu
