// make_runner: builds the ModelRunner for `dsv4 serve`: device "cpu" -> CpuRunner (src/cpu),
// "cuda" -> GpuRunner (src/gpu; only in builds with the CUDA backend and a visible device).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/model_runner.h"

namespace dsv4::engine {

struct RunnerOptions {
  std::string model_dir;            // empty = the embedded tiny model
  std::string device = "cpu";       // "cpu" | "cuda"
  int64_t max_context = 0;          // 0 = the model's own limit
  int64_t max_running_requests = 64;
  double mem_fraction_static = 0.88;  // GPU only: fraction of device memory for weights+caches
  int num_threads = 0;              // CPU only: 0 = default
  std::string load_format = "auto";  // "auto" (checkpoint) | "dummy" (random weights; cuda only)
  std::string model_config;         // dummy: config.json path (default: <model_dir>/config.json)
  int num_layers = 0;               // > 0: keep only the first N trunk layers (memory; dummy/dev)
  int tp_size = 1;                  // cuda: tensor-parallel GPUs (devices 0..tp-1, NCCL)
  uint64_t dummy_seed = 1234;
  int cuda_graph_max_bs = 0;        // cuda only: decode CUDA graphs up to this batch (0 = none)
  bool device_sampling = true;      // cuda only: sample decode rows on the GPU (false: on the host)
};

// Throws dsv4::Error when the model cannot be loaded or the device is not built in.
std::unique_ptr<ModelRunner> make_runner(const RunnerOptions& options);

}  // namespace dsv4::engine
