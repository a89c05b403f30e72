#include "cpu/sequence_state.h"

#include <algorithm>

#include "base/check.h"

namespace dsv4::cpu {

void reset_compressor_state(CompressorStateRef st) {
  const size_t n = static_cast<size_t>(st.slots) * st.width;
  std::fill_n(st.kv, n, 0.0f);
  std::fill_n(st.score, n, -std::numeric_limits<float>::infinity());
}

DenseLayerState::DenseLayerState(const LayerStateShape& shape) : shape_(shape) {
  window_.assign(static_cast<size_t>(shape.window * shape.head_dim), 0.0f);
  const size_t comp = static_cast<size_t>(shape.comp_slots) * shape.comp_width;
  comp_kv_.assign(comp, 0.0f);
  comp_score_.assign(comp, -std::numeric_limits<float>::infinity());
  const size_t idx = static_cast<size_t>(shape.index_slots) * shape.index_width;
  index_kv_.assign(idx, 0.0f);
  index_score_.assign(idx, -std::numeric_limits<float>::infinity());
}

float* DenseLayerState::window_slot(int64_t slot) {
  DSV4_CHECK(slot >= 0 && slot < shape_.window, "window slot ", slot, " out of range");
  return &window_[static_cast<size_t>(slot * shape_.head_dim)];
}

float* DenseLayerState::compressed_entry(int64_t entry) {
  DSV4_CHECK(shape_.ratio > 0, "this layer has no compressed KV");
  const size_t need = static_cast<size_t>((entry + 1) * shape_.head_dim);
  if (compressed_.size() < need) compressed_.resize(need, 0.0f);
  return &compressed_[static_cast<size_t>(entry * shape_.head_dim)];
}

float* DenseLayerState::index_key(int64_t entry) {
  DSV4_CHECK(shape_.index_head_dim > 0, "this layer has no indexer keys");
  const size_t need = static_cast<size_t>((entry + 1) * shape_.index_head_dim);
  if (index_keys_.size() < need) index_keys_.resize(need, 0.0f);
  return &index_keys_[static_cast<size_t>(entry * shape_.index_head_dim)];
}

CompressorStateRef DenseLayerState::compressor(bool indexer) {
  if (indexer)
    return {index_kv_.data(), index_score_.data(), shape_.index_slots, shape_.index_width};
  return {comp_kv_.data(), comp_score_.data(), shape_.comp_slots, shape_.comp_width};
}

}  // namespace dsv4::cpu
