// `dsv4 logits --model DIR --cases MANIFEST --out OUT.safetensors [--device cpu|cuda]`:
// runs the golden protocol and writes case<i>.logits / mtp_logits / x_layers.
// With --check, evaluates the set's gates against golden.safetensors beside the manifest.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "apps/dsv4/commands.h"
#include "base/check.h"
#include "cpu/model.h"
#include "eval/cpu_golden_backend.h"
#include "eval/gates.h"
#include "eval/logits_runner.h"
#ifdef DSV4_WITH_CUDA
#include "gpu/gpu_golden_backend.h"
#endif

namespace {

struct LogitsArgs {
  std::string model_dir, cases, out, device = "cpu";
  bool check = false, no_mtp = false, no_streams = false;
  int tp = 1;
};

void run_logits(const LogitsArgs& a) {
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  const auto manifest = dsv4::eval::load_manifest(a.cases);
  std::unique_ptr<dsv4::eval::GoldenBackend> backend;
#ifdef DSV4_WITH_CUDA
  if (a.device == "cuda")
    backend = std::make_unique<dsv4::gpu::GpuGoldenBackend>(std::shared_ptr<dsv4::gpu::GpuModel>(
        dsv4::gpu::GpuModel::load(a.model_dir, dsv4::gpu::GpuModelOptions{.tp_size = a.tp})));
#endif
  DSV4_CHECK(a.tp == 1 || a.device == "cuda", "--tp needs --device cuda");
  if (!backend) {
    DSV4_CHECK(a.device == "cpu", "--device ", a.device,
               ": only the cpu backend is available for golden runs in this build");
    std::shared_ptr<const dsv4::cpu::CpuModel> model = dsv4::cpu::CpuModel::load(a.model_dir);
    backend = std::make_unique<dsv4::eval::CpuGoldenBackend>(model);
  }
  const auto tensors = dsv4::eval::run_golden_cases(
      *backend, manifest, !a.no_mtp, !a.no_streams, [](int done, int total) {
        std::fprintf(stderr, "\r[dsv4 logits] cases %d/%d", done, total);
        if (done == total) std::fprintf(stderr, "\n");
      });
  dsv4::eval::write_output_tensors(tensors, a.out);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %zu tensors for %zu cases to %s (%.2f s, device %s)\n", tensors.size(),
              manifest.cases.size(), a.out.c_str(), secs, a.device.c_str());
  if (a.check) {
    const auto golden = fs::path(a.cases).parent_path() / "golden.safetensors";
    const auto report = dsv4::eval::evaluate_gates(manifest, golden, a.out);
    std::printf("%s", report.to_string().c_str());
    DSV4_CHECK(report.passed(), "golden gates failed for ", manifest.name);
  }
}

const dsv4::app::CommandRegistrar kRegister([](CLI::App& root) {
  auto args = std::make_shared<LogitsArgs>();
  auto* cmd = root.add_subcommand("logits", "Compute golden-protocol logits for a manifest");
  cmd->add_option("--model", args->model_dir, "model directory (config.json + safetensors)")
      ->required();
  cmd->add_option("--cases", args->cases, "golden manifest.json")->required();
  cmd->add_option("--out", args->out, "output safetensors file")->required();
  cmd->add_option("--device", args->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--tp", args->tp, "cuda: tensor-parallel GPUs (devices 0..tp-1)")->check(CLI::Range(1, 8));
  cmd->add_flag("--check", args->check, "evaluate the gates against golden.safetensors");
  cmd->add_flag("--no-mtp", args->no_mtp, "skip the MTP block");
  cmd->add_flag("--no-streams", args->no_streams, "do not write x_layers");
  cmd->callback([args] { run_logits(*args); });
});

}  // namespace
