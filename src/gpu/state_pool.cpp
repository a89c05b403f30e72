#include "gpu/state_pool.h"

#include <algorithm>

#include "base/check.h"
#include "gpu/kv_fp8.h"
#include "gpu/ops.h"

namespace dsv4::gpu {
namespace {

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Makes `device` current for a scope and restores the previous device.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    CUDA_CHECK(cudaGetDevice(&prev_));
    if (device != prev_) CUDA_CHECK(cudaSetDevice(device));
    switched_ = device != prev_;
  }
  ~DeviceScope() {
    if (switched_) (void)cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0;
  bool switched_ = false;
};

// Bytes of the fields in slot order.
std::array<int64_t, GpuStatePool::kNumFields> field_sizes(const LayerStateShape& s) {
  constexpr int64_t f = sizeof(float);
  return {kv_cache_bytes(s.window), kv_cache_bytes(s.compressed), s.index_keys * 2, s.comp_state * f,
          s.comp_state * f, s.index_state * f, s.index_state * f};
}

}  // namespace

std::vector<LayerStateShape> sequence_state_shape(const model::ModelConfig& config, const GpuWeights& weights,
                                                  int64_t max_len) {
  const int trunk = config.num_layers();
  const int total = trunk + config.num_nextn_predict_layers;
  std::vector<LayerStateShape> out(static_cast<size_t>(total));
  for (int l = 0; l < total; ++l) {
    LayerStateShape& s = out[l];
    s.window = config.sliding_window;
    const BlockW& bw = l < trunk ? weights.layers[l] : weights.mtp[l - trunk].block;
    // A compressor's state is [c·ratio, c·head_dim] (c = 2 when overlapped); it emits
    // max(1, max_len / ratio) entries (FP8 cache entries, or indexer keys of head_dim bf16).
    auto state = [](const CompressorW& cw) {
      const int64_t c = cw.overlap ? 2 : 1;
      return c * cw.ratio * c * cw.head_dim;
    };
    auto entries = [&](const CompressorW& cw) { return std::max<int64_t>(1, max_len / cw.ratio); };
    if (bw.attn.compressor) {
      s.comp_state = state(*bw.attn.compressor);
      s.compressed = entries(*bw.attn.compressor);
    }
    if (bw.attn.indexer) {
      const CompressorW& ic = bw.attn.indexer->compressor;
      s.index_state = state(ic);
      s.index_keys = entries(ic) * ic.head_dim;
    }
  }
  return out;
}

int64_t GpuStatePool::slot_bytes_for(const std::vector<LayerStateShape>& shape) {
  int64_t bytes = 0;
  for (const LayerStateShape& s : shape) {
    for (int64_t b : field_sizes(s)) bytes += align_up(b, kAlign);
  }
  return std::max<int64_t>(bytes, kAlign);
}

int64_t GpuStatePool::main_kv_bytes_for(const std::vector<LayerStateShape>& shape) {
  int64_t bytes = 0;
  for (const LayerStateShape& s : shape) {
    const auto sizes = field_sizes(s);
    bytes += align_up(sizes[kWindow], kAlign) + align_up(sizes[kCompressed], kAlign);
  }
  return bytes;
}

GpuStatePool::GpuStatePool(std::vector<LayerStateShape> shape, int64_t slots, int device)
    : shape_(std::move(shape)), slots_(slots) {
  DSV4_CHECK(slots_ >= 1 && slots_ < (int64_t{1} << 31), "state pool: bad slot count ", slots_);
  if (device < 0) CUDA_CHECK(cudaGetDevice(&device));
  device_ = device;
  const DeviceScope on(device_);
  offsets_.resize(shape_.size());
  int64_t off = 0;
  for (size_t l = 0; l < shape_.size(); ++l) {
    const auto sizes = field_sizes(shape_[l]);
    for (int f = 0; f < kNumFields; ++f) {
      offsets_[l][f] = off;
      off += align_up(sizes[f], kAlign);
    }
  }
  slot_bytes_ = slot_bytes_for(shape_);
  DSV4_CHECK(off <= slot_bytes_, "state pool: layout of ", off, " bytes exceeds the slot size ", slot_bytes_);
  memory_.resize(static_cast<size_t>(slots_ * slot_bytes_));  // one cudaMalloc: exportable (CUDA IPC)
  in_use_.assign(static_cast<size_t>(slots_), false);
  free_.reserve(static_cast<size_t>(slots_));
  for (int64_t s = slots_ - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
}

GpuStatePool::~GpuStatePool() {
  int prev = 0;
  if (cudaGetDevice(&prev) != cudaSuccess) return;
  if (prev != device_) (void)cudaSetDevice(device_);
  memory_ = DeviceBuffer<std::byte>();  // cudaFree on the pool's device
  if (prev != device_) (void)cudaSetDevice(prev);
}

int64_t GpuStatePool::field_bytes(int64_t layer, Field f) const {
  return field_sizes(shape_.at(static_cast<size_t>(layer)))[f];
}

std::byte* GpuStatePool::slot_ptr(int64_t slot) {
  DSV4_CHECK(slot >= 0 && slot < slots_, "state pool: slot ", slot, " out of range [0, ", slots_, ")");
  return memory_.get() + slot * slot_bytes_;
}

GpuSequenceState GpuStatePool::acquire(cudaStream_t stream) {
  DSV4_CHECK(!free_.empty(), "state pool: all ", slots_, " sequence slots are in use");
  const int32_t slot = free_.back();
  std::byte* base = slot_ptr(slot);
  GpuSequenceState st;
  st.slot = slot;
  st.layers.resize(shape_.size());
  for (size_t l = 0; l < shape_.size(); ++l) {
    const auto sizes = field_sizes(shape_[l]);
    auto view = [&](int f) {
      return DeviceBuffer<float>::view(reinterpret_cast<float*>(base + offsets_[l][f]),
                                       static_cast<size_t>(sizes[f]) / sizeof(float));
    };
    auto kv_view = [&](int f) {
      return DeviceBuffer<uint8_t>::view(reinterpret_cast<uint8_t*>(base + offsets_[l][f]), static_cast<size_t>(sizes[f]));
    };
    GpuLayerCache& c = st.layers[l];
    c.window = kv_view(kWindow);
    c.compressed = kv_view(kCompressed);
    c.index_keys = DeviceBuffer<uint16_t>::view(reinterpret_cast<uint16_t*>(base + offsets_[l][kIndexKeys]),
                                                static_cast<size_t>(sizes[kIndexKeys]) / sizeof(uint16_t));
    c.comp_kv = view(kCompKv);
    c.comp_score = view(kCompScore);
    c.index_kv = view(kIndexKv);
    c.index_score = view(kIndexScore);
  }
  reset(st, stream);  // may throw: the slot is only taken once the state is ready
  free_.pop_back();
  in_use_[static_cast<size_t>(slot)] = true;
  return st;
}

void GpuStatePool::reset(GpuSequenceState& st, cudaStream_t stream) {
  DSV4_CHECK(st.slot >= 0 && st.slot < slots_ && st.layers.size() == shape_.size(),
             "state pool: reset of a state that is not from this pool (slot ", st.slot, ")");
  // What new_sequence() initialises; compressed entries / indexer keys are written before
  // they are read, so they keep whatever the slot held.
  const DeviceScope on(device_);
  for (GpuLayerCache& c : st.layers) {
    if (!c.window.empty()) CUDA_CHECK(cudaMemsetAsync(c.window.get(), 0, c.window.bytes(), stream));
    compressor_reset(c.comp_kv.get(), c.comp_score.get(), static_cast<int64_t>(c.comp_kv.size()), stream);
    compressor_reset(c.index_kv.get(), c.index_score.get(), static_cast<int64_t>(c.index_kv.size()), stream);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  st.length = 0;
  st.mtp_length = 0;
}

void GpuStatePool::release(int64_t slot) {
  DSV4_CHECK(slot >= 0 && slot < slots_, "state pool: release of slot ", slot, " out of range [0, ", slots_, ")");
  DSV4_CHECK(in_use_[static_cast<size_t>(slot)], "state pool: slot ", slot, " released twice");
  in_use_[static_cast<size_t>(slot)] = false;
  free_.push_back(static_cast<int32_t>(slot));
}

cudaIpcMemHandle_t GpuStatePool::ipc_handle() const {
  cudaIpcMemHandle_t h{};
  const DeviceScope on(device_);
  CUDA_CHECK(cudaIpcGetMemHandle(&h, const_cast<std::byte*>(memory_.get())));
  return h;
}

}  // namespace dsv4::gpu
