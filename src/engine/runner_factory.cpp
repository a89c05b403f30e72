// make_runner for `dsv4 serve`: the CPU backend (embedded tiny model or a checkpoint dir).
#include "engine/runner_factory.h"

#include "base/check.h"
#include "base/parallel.h"
#include "engine/cpu_runner.h"
#include "engine/log.h"
#include "model/embedded_model.h"

namespace dsv4::engine {

std::unique_ptr<ModelRunner> make_runner(const RunnerOptions& options) {
  DSV4_CHECK(options.device == "cpu", "device '", options.device,
             "' is not available for serving in this build (available: cpu)");
  std::shared_ptr<const cpu::CpuModel> model;
  if (options.model_dir.empty()) {
    const auto config = model::ModelConfig::from_json(model::embedded_tiny_config_json());
    model = cpu::CpuModel::from_checkpoint(config, model::embedded_tiny_checkpoint());
    log::info("Model: built-in tiny DeepSeek-V4 (random weights, meaningless output)");
  } else {
    model = cpu::CpuModel::load(options.model_dir);
    log::info(str_cat("Model: ", options.model_dir));
  }
  log::info(str_cat("CPU backend: ", num_threads(), " threads"));
  return std::make_unique<CpuRunner>(std::move(model), options.max_context);
}

}  // namespace dsv4::engine
