// make_runner for `dsv4 serve`: the CPU backend or, in CUDA builds, the GPU backend, over the
// embedded tiny model, a checkpoint dir, or (cuda only) dummy weights of a config.json.
#include "engine/runner_factory.h"

#include <filesystem>

#include "base/check.h"
#include "base/parallel.h"
#include "engine/cpu_runner.h"
#include "engine/log.h"
#include "model/embedded_model.h"
#ifdef DSV4_WITH_CUDA
#include "engine/gpu_runner.h"
#include "gpu/profiler.h"
#endif

namespace dsv4::engine {
namespace {

#ifdef DSV4_WITH_CUDA
std::unique_ptr<ModelRunner> make_gpu_runner(const RunnerOptions& options) {
  DSV4_CHECK(gpu::has_cuda_device(), "no CUDA device: `--device cuda` needs a visible NVIDIA GPU");
  gpu::GpuModelOptions go;
  go.max_seq_len = options.max_context;
  go.tp_size = options.tp_size;
  std::unique_ptr<gpu::GpuModel> model;
  if (options.load_format == "dummy") {
    std::string path = options.model_config;
    if (path.empty() && !options.model_dir.empty()) path = (std::filesystem::path(options.model_dir) / "config.json").string();
    DSV4_CHECK(!path.empty(), "--load-format dummy needs --model-config FILE or --model DIR with a config.json");
    const auto config = gpu::prof::with_num_layers(model::ModelConfig::from_file(path), options.num_layers);
    model = gpu::GpuModel::dummy(config, options.dummy_seed, go);
    log::info(str_cat("Model: dummy (random) weights of ", path, ", ", config.num_hidden_layers, " layers, ",
                      model->weights().total_bytes >> 20, " MiB on device 0 (tp ", options.tp_size, ")"));
  } else if (options.model_dir.empty()) {
    auto config = model::ModelConfig::from_json(model::embedded_tiny_config_json());
    DSV4_CHECK(options.num_layers <= 0, "--num-layers needs --load-format dummy");
    model = gpu::GpuModel::from_checkpoint(config, model::embedded_tiny_checkpoint(), go);
    log::info("Model: built-in tiny DeepSeek-V4 (random weights, meaningless output) on the GPU");
  } else {
    DSV4_CHECK(options.num_layers <= 0, "--num-layers needs --load-format dummy");
    model = gpu::GpuModel::load(options.model_dir, go);
    log::info(str_cat("Model: ", options.model_dir, " on the GPU"));
  }
  return std::make_unique<GpuRunner>(
      std::move(model), GpuRunnerOptions{.max_running_requests = options.max_running_requests,
                                         .mem_fraction_static = options.mem_fraction_static,
                                         .cuda_graph_max_bs = options.cuda_graph_max_bs,
                                         .device_sampling = options.device_sampling});
}
#endif

}  // namespace

std::unique_ptr<ModelRunner> make_runner(const RunnerOptions& options) {
  DSV4_CHECK(options.load_format == "auto" || options.load_format == "dummy", "unknown --load-format '",
             options.load_format, "' (auto | dummy)");
  if (options.device == "cuda") {
#ifdef DSV4_WITH_CUDA
    return make_gpu_runner(options);
#else
    DSV4_FAIL("CUDA backend not built: this dsv4 was configured without nvcc (or with -DDSV4_CUDA=OFF)");
#endif
  }
  DSV4_CHECK(options.device == "cpu", "unknown device '", options.device, "' (cpu | cuda)");
  DSV4_CHECK(options.load_format == "auto", "--load-format dummy is supported with --device cuda only");
  DSV4_CHECK(options.tp_size == 1, "--tp-size ", options.tp_size, " is supported with --device cuda only");
  DSV4_CHECK(options.num_layers <= 0, "--num-layers is supported with --device cuda --load-format dummy only");
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
