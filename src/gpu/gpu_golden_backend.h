// The CUDA model behind eval's GoldenBackend interface (lives in gpu/ as its own small
// library, dsv4_gpu_golden, so that eval's CPU-only build is untouched).
#pragma once

#include <memory>

#include "eval/logits_runner.h"
#include "gpu/gpu_model.h"

namespace dsv4::gpu {

class GpuGoldenBackend : public eval::GoldenBackend {
 public:
  explicit GpuGoldenBackend(std::shared_ptr<GpuModel> model);
  const model::ModelConfig& config() const override { return model_->config(); }
  std::string name() const override { return "cuda"; }
  void reset() override;
  std::vector<float> forward(std::span<const int32_t> tokens, std::vector<float>* layer_streams) override;
  std::vector<float> mtp(std::span<const int32_t> next_ids) override;

 private:
  std::shared_ptr<GpuModel> model_;
  GpuSequenceState state_;
  std::vector<float> last_streams_;
  int64_t last_start_ = 0;
};

}  // namespace dsv4::gpu
