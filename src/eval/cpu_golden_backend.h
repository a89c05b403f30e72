// The CPU reference model behind the GoldenBackend interface.
#pragma once

#include <memory>

#include "cpu/model.h"
#include "eval/logits_runner.h"

namespace dsv4::eval {

class CpuGoldenBackend : public GoldenBackend {
 public:
  explicit CpuGoldenBackend(std::shared_ptr<const cpu::CpuModel> model);
  const model::ModelConfig& config() const override { return model_->config(); }
  std::string name() const override { return "cpu"; }
  void reset() override;
  std::vector<float> forward(std::span<const int32_t> tokens,
                             std::vector<float>* layer_streams) override;
  std::vector<float> mtp(std::span<const int32_t> next_ids) override;

 private:
  std::shared_ptr<const cpu::CpuModel> model_;
  cpu::SequenceState state_;
  std::vector<float> last_streams_;  // [n, hc, D] of the last trunk call
  int64_t last_start_ = 0;
};

}  // namespace dsv4::eval
