// Per-sequence state of the CPU reference backend (spec §5.1), behind an interface so it can
// live in dense vectors (golden runs, tests) or in the engine's paged cache pools (serving).
//
// One LayerState per trunk layer plus one per MTP block. Window/compressed/indexer entries
// are bf16 numbers held in floats; compressor states are true fp32. Used by one thread at a
// time (the forward pass reads and writes distinct entries from its worker threads).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

namespace dsv4::cpu {

// Streaming state of one compressor (spec §4.5): `slots` rows of `width` fp32 values.
// Overlap (r = 4): slots = 2r, width = 2h (rows 0..r−1 = previous window, r..2r−1 = current).
// Non-overlap: slots = r, width = h. Scores are stored with `ape` already added.
// A fresh state has kv = 0 and score = −inf.
struct CompressorStateRef {
  float* kv = nullptr;     // [slots, width]
  float* score = nullptr;  // [slots, width]
  int slots = 0;
  int width = 0;
};

// Shapes of one layer's state (derived from the config and the layer's ratio).
struct LayerStateShape {
  int64_t window = 0;        // ring slots (sliding_window)
  int64_t head_dim = 0;      // window / compressed entry width
  int ratio = 0;             // 0 = window only
  int64_t index_head_dim = 0;  // > 0 on ratio-4 layers (indexer keys)
  int comp_slots = 0, comp_width = 0;    // main compressor state (ratio > 0)
  int index_slots = 0, index_width = 0;  // indexer compressor state (ratio 4)
};

class LayerState {
 public:
  virtual ~LayerState() = default;
  // Ring slot `slot` (= position mod window): [head_dim].
  virtual float* window_slot(int64_t slot) = 0;
  // Compressed entry w (covers tokens r·w .. r·w+r−1): [head_dim]. Entries are written in
  // order; the storage must hold every entry up to the sequence's current length.
  virtual float* compressed_entry(int64_t entry) = 0;
  // Indexer key w: [index_head_dim].
  virtual float* index_key(int64_t entry) = 0;
  virtual CompressorStateRef compressor(bool indexer) = 0;
};

// Dense, growable storage in std::vectors.
class DenseLayerState : public LayerState {
 public:
  explicit DenseLayerState(const LayerStateShape& shape);
  float* window_slot(int64_t slot) override;
  float* compressed_entry(int64_t entry) override;
  float* index_key(int64_t entry) override;
  CompressorStateRef compressor(bool indexer) override;

 private:
  LayerStateShape shape_;
  std::vector<float> window_, compressed_, index_keys_;
  std::vector<float> comp_kv_, comp_score_, index_kv_, index_score_;
};

struct SequenceState {
  std::vector<std::unique_ptr<LayerState>> layers;  // trunk layers, then MTP blocks
  int64_t length = 0;      // positions already processed by the trunk
  int64_t mtp_length = 0;  // positions already processed by MTP block 0
};

// Resets a compressor state to kv = 0, score = −inf.
void reset_compressor_state(CompressorStateRef st);

}  // namespace dsv4::cpu
