// GpuStatePool: every sequence's device state in ONE cudaMalloc allocation, carved into N
// fixed slots (issue 5). A slot holds exactly what GpuModel::new_sequence() allocates: per
// layer (trunk layers, then MTP blocks) the window ring, compressed KV, indexer keys and the
// two compressor states. acquire() hands out a GpuSequenceState whose DeviceBuffers are
// non-owning views into a free slot, reset on the device (window 0, compressor kv 0 / score
// −inf, length 0), so forward() on it is bit-identical to forward() on new_sequence().
//
// Slot layout (each buffer starting on a 256-byte boundary):
//   slot s at base + s·slot_bytes; inside, for layer l in order, the buffers
//   window: sliding_window entries | compressed: max(1, L/r) entries (both FP8, 584-byte
//   layout in pages of 64 entries, kv_cache_bytes() bytes, kv_fp8.h) |
//   index_keys bf16 [max(1, L/r), index_head_dim] | comp_kv, comp_score fp32 [c·r, c·h] |
//   index_kv, index_score fp32 [c·r, c·h_I]   (absent buffers take no bytes; c = 2 when overlapped)
// so one sequence is one contiguous byte range: another process can map the whole pool
// (ipc_handle(), CUDA IPC) and copy or receive a slot as one range (PD disaggregation).
//
// Thread-safety: none (the engine thread). Ownership: the pool owns the allocation; states
// from acquire() must not outlive it and go back through release(state.slot).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/gpu_model.h"

namespace dsv4::gpu {

// Sizes of one layer's state buffers (0 = the layer has no such buffer).
struct LayerStateShape {
  int64_t window = 0;       // entries: sliding_window (FP8 cache)
  int64_t compressed = 0;   // entries: max(1, max_len / ratio) (FP8 cache; layers with a compressor)
  int64_t index_keys = 0;   // bf16 count: max(1, max_len / ratio) · index_head_dim (layers with an indexer)
  int64_t comp_state = 0;   // comp_kv and comp_score each: (c·ratio) · (c·head_dim)
  int64_t index_state = 0;  // index_kv and index_score each
};

// The state of one sequence of max_len positions, layer by layer (trunk, then MTP blocks).
std::vector<LayerStateShape> sequence_state_shape(const model::ModelConfig& config, const GpuWeights& weights,
                                                  int64_t max_len);
inline std::vector<LayerStateShape> sequence_state_shape(const GpuModel& m) {
  return sequence_state_shape(m.config(), m.weights(), m.max_seq_len());
}

class GpuStatePool {
 public:
  // Buffers of a layer, in slot order (see the file comment).
  enum Field { kWindow, kCompressed, kIndexKeys, kCompKv, kCompScore, kIndexKv, kIndexScore, kNumFields };
  static constexpr int64_t kAlign = 256;

  // Allocates `slots` >= 1 slots of `shape` in one cudaMalloc on `device` (-1: the current
  // one); contents undefined until acquired. Every call switches to that device and back,
  // so a tensor-parallel runner can keep one pool per rank's device.
  GpuStatePool(std::vector<LayerStateShape> shape, int64_t slots, int device = -1);
  ~GpuStatePool();
  GpuStatePool(const GpuStatePool&) = delete;
  GpuStatePool& operator=(const GpuStatePool&) = delete;

  // Bytes of one slot of `shape` (what the memory planner divides the budget by), and the part
  // of it taken by the main KV caches (window rings + compressed entries).
  static int64_t slot_bytes_for(const std::vector<LayerStateShape>& shape);
  static int64_t main_kv_bytes_for(const std::vector<LayerStateShape>& shape);

  int64_t slots() const { return slots_; }
  int64_t free_slots() const { return static_cast<int64_t>(free_.size()); }
  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t total_bytes() const { return slots_ * slot_bytes_; }
  int64_t num_layers() const { return static_cast<int64_t>(shape_.size()); }
  int device() const { return device_; }
  // Byte offset of layer l's buffer f inside a slot, and its size in bytes.
  int64_t field_offset(int64_t layer, Field f) const { return offsets_[layer][f]; }
  int64_t field_bytes(int64_t layer, Field f) const;
  std::byte* base() { return memory_.get(); }
  std::byte* slot_ptr(int64_t slot);

  // Takes a free slot, resets it on `stream` and waits for the reset; the state has
  // length 0 and state.slot set. Throws dsv4::Error when every slot is in use.
  GpuSequenceState acquire(cudaStream_t stream = nullptr);
  // Restarts a held state from position 0 in place (recomputation after preemption).
  void reset(GpuSequenceState& state, cudaStream_t stream = nullptr);
  // Returns a slot taken by acquire(); its views must not be used afterwards.
  void release(int64_t slot);
  bool in_use(int64_t slot) const { return in_use_.at(static_cast<size_t>(slot)); }

  // CUDA IPC handle of the whole allocation (offset 0 = slot 0): another process opens it
  // with cudaIpcOpenMemHandle and addresses slot s at s·slot_bytes().
  cudaIpcMemHandle_t ipc_handle() const;

 private:
  std::vector<LayerStateShape> shape_;
  int device_ = 0;
  std::vector<std::array<int64_t, kNumFields>> offsets_;  // [layer][field] bytes in a slot
  int64_t slot_bytes_ = 0;
  int64_t slots_ = 0;
  DeviceBuffer<std::byte> memory_;  // slots_ · slot_bytes_
  std::vector<int32_t> free_;       // stack of free slot ids (lowest on top)
  std::vector<bool> in_use_;
};

}  // namespace dsv4::gpu
