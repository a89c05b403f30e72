#include "gpu/profiler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "gpu/cuda_check.h"
#include "gpu/gpu_model.h"
#include "gpu/kv_fp8.h"
#include "model/model_config.h"

namespace dsv4::gpu::prof {
namespace detail {
std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {
LaunchObserver* g_observer = nullptr;  // set from the launching thread, between steps
}  // namespace

namespace {

struct Pending {
  std::string kernel, shape;
  double bytes = 0;
  cudaEvent_t start = nullptr, stop = nullptr;  // null: not timed (graph capture)
};

struct Registry {
  std::vector<Pending> pending;
  std::vector<cudaEvent_t> free_events;
  std::map<std::pair<std::string, std::string>, KernelStat> totals;

  cudaEvent_t event() {
    if (free_events.empty()) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      return e;
    }
    cudaEvent_t e = free_events.back();
    free_events.pop_back();
    return e;
  }
  // Folds every pending record into the totals (waits for the device).
  void resolve() {
    if (pending.empty()) return;
    CUDA_CHECK(cudaDeviceSynchronize());
    for (Pending& p : pending) {
      KernelStat& t = totals[{p.kernel, p.shape}];
      t.kernel = p.kernel;
      t.shape = p.shape;
      t.calls += 1;
      t.bytes += p.bytes;
      if (p.start != nullptr) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
        t.us += 1000.0 * ms;
        free_events.push_back(p.start);
        free_events.push_back(p.stop);
      }
    }
    pending.clear();
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

constexpr size_t kMaxPending = 16384;

}  // namespace

namespace detail {

void begin(const char* kernel, const std::string& shape, double bytes, cudaStream_t s, void** token) {
  Registry& r = registry();
  if (r.pending.size() >= kMaxPending) r.resolve();
  Pending p;
  p.kernel = kernel;
  p.shape = shape;
  p.bytes = bytes;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (s != nullptr) CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
  if (cap == cudaStreamCaptureStatusNone) {
    p.start = r.event();
    p.stop = r.event();
    CUDA_CHECK(cudaEventRecord(p.start, s));
  }
  r.pending.push_back(std::move(p));
  *token = reinterpret_cast<void*>(r.pending.size());  // index + 1
  if (g_observer != nullptr) g_observer->on_begin(kernel, bytes);
}

void end(void* token, cudaStream_t s) {
  if (g_observer != nullptr) g_observer->on_end();
  Registry& r = registry();
  const size_t i = reinterpret_cast<size_t>(token) - 1;
  if (i < r.pending.size() && r.pending[i].stop != nullptr) CUDA_CHECK(cudaEventRecord(r.pending[i].stop, s));
}

}  // namespace detail

void set_enabled(bool on) { detail::g_enabled.store(on, std::memory_order_relaxed); }

void set_launch_observer(LaunchObserver* observer) { g_observer = observer; }

std::vector<KernelStat> collect(bool by_shape) {
  Registry& r = registry();
  r.resolve();
  std::vector<KernelStat> out;
  if (by_shape) {
    for (const auto& [key, t] : r.totals) out.push_back(t);
  } else {
    std::map<std::string, KernelStat> by_kernel;
    for (const auto& [key, t] : r.totals) {
      KernelStat& k = by_kernel[t.kernel];
      k.kernel = t.kernel;
      k.calls += t.calls;
      k.us += t.us;
      k.bytes += t.bytes;
    }
    for (auto& [name, k] : by_kernel) out.push_back(std::move(k));
  }
  std::sort(out.begin(), out.end(), [](const KernelStat& a, const KernelStat& b) {
    return a.us != b.us ? a.us > b.us : a.bytes > b.bytes;
  });
  return out;
}

void reset() {
  Registry& r = registry();
  r.resolve();
  r.totals.clear();
}

model::ModelConfig with_num_layers(model::ModelConfig cfg, int num_layers) {
  if (num_layers <= 0 || num_layers >= cfg.num_hidden_layers) return cfg;
  // compress_ratios holds the trunk layers, then the MTP blocks: keep the MTP entries.
  std::vector<int> mtp(cfg.compress_ratios.begin() + cfg.num_hidden_layers, cfg.compress_ratios.end());
  cfg.compress_ratios.resize(static_cast<size_t>(num_layers));
  cfg.compress_ratios.insert(cfg.compress_ratios.end(), mtp.begin(), mtp.end());
  cfg.num_hidden_layers = num_layers;
  cfg.num_hash_layers = std::min(cfg.num_hash_layers, num_layers);
  return cfg;
}

double measure_copy_bandwidth_gbs(int64_t bytes, int iters) {
  DeviceBuffer<uint8_t> src(static_cast<size_t>(bytes)), dst(static_cast<size_t>(bytes));
  src.fill_bytes(0);
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < iters + 2; ++i) {
    CUDA_CHECK(cudaEventRecord(a));
    CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    if (i >= 2) ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  const double sec = ms[ms.size() / 2] * 1e-3;
  return 2.0 * static_cast<double>(bytes) / sec / 1e9;
}

namespace {

double bytes_of(const Lin8W& w) { return double(w.w.bytes() + w.s.bytes()); }
double bytes_of(const DenseW& w) { return double(w.bytes()); }
double bytes_of(const HcW& w) { return double(w.fn.bytes() + w.base.bytes() + w.scale.bytes()); }
double bytes_of(const CompressorW& w) {
  return double(w.wkv.bytes() + w.wgate.bytes() + w.ape.bytes() + w.norm.bytes());
}
double bytes_of(const ExpertsW& e) {
  return double(e.w1.bytes() + e.w2.bytes() + e.w3.bytes() + e.s1.bytes() + e.s2.bytes() + e.s3.bytes());
}
// Everything of a block but its routed experts.
double dense_bytes_of(const BlockW& b) {
  const AttentionW& a = b.attn;
  double t = double(b.attn_norm.bytes() + b.ffn_norm.bytes()) + bytes_of(b.hc_attn) + bytes_of(b.hc_ffn);
  t += double(a.sink.bytes() + a.q_norm.bytes() + a.kv_norm.bytes());
  t += bytes_of(a.wq_a) + bytes_of(a.wq_b) + bytes_of(a.wkv) + bytes_of(a.wo_b) + bytes_of(a.wo_a);
  if (a.compressor) t += bytes_of(*a.compressor);
  if (a.indexer) t += bytes_of(a.indexer->wq_b) + bytes_of(a.indexer->weights_proj) + bytes_of(a.indexer->compressor);
  const MoeW& f = b.ffn;
  t += bytes_of(f.gate) + double(f.bias.bytes()) + bytes_of(f.sw1) + bytes_of(f.sw2) + bytes_of(f.sw3);
  return t;  // tid2eid: one row per token, negligible
}

}  // namespace

double expected_distinct_experts(double E, double k, double n) { return E * (1.0 - std::pow(1.0 - k / E, n)); }

DecodeBytes decode_must_read(const GpuModel& model, int batch, int64_t context) {
  const model::ModelConfig& c = model.config();
  const GpuWeights& w = model.weights();
  DecodeBytes r;
  const double E = c.n_routed_experts, k = c.num_experts_per_tok;
  r.expected_experts_per_layer = expected_distinct_experts(E, k, batch);
  r.dense_weights = bytes_of(w.head) + double(w.norm.bytes()) + bytes_of(w.hc_head) +
                    double(batch) * c.hidden_size * 2;  // embedding rows
  for (int l = 0; l < c.num_layers(); ++l) {
    const BlockW& b = w.layers[l];
    r.dense_weights += dense_bytes_of(b);
    r.expert_weights += bytes_of(b.ffn.experts) / b.ffn.experts.num * r.expected_experts_per_layer;
    const int ratio = c.compress_ratio(l);
    double rows = double(std::min<int64_t>(context, c.sliding_window));
    if (ratio > 0) {
      const double entries = double(context / ratio);
      rows += b.attn.indexer ? std::min(entries, double(c.index_topk)) : entries;
      if (b.attn.indexer) r.state_per_sequence += entries * c.index_head_dim * 4;
    }
    r.state_per_sequence += rows * kKvEntryBytes;  // window + compressed rows: 584-byte FP8 entries
  }
  return r;
}

}  // namespace dsv4::gpu::prof
