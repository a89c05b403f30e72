// make_runner: builds the ModelRunner for `dsv4 serve`. Implemented by the backend owner
// (src/cpu for device "cpu", src/gpu for "cuda"). Until a backend provides it,
// runner_factory_stub.cpp (compiled only when no implementation exists) throws.
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
};

// Throws dsv4::Error when the model cannot be loaded or the device is not built in.
std::unique_ptr<ModelRunner> make_runner(const RunnerOptions& options);

}  // namespace dsv4::engine
