#include "gpu/gpu_golden_backend.h"

#include "base/check.h"

namespace dsv4::gpu {

GpuGoldenBackend::GpuGoldenBackend(std::shared_ptr<GpuModel> model) : model_(std::move(model)) { reset(); }

void GpuGoldenBackend::reset() {
  state_ = model_->new_sequence();
  last_streams_.clear();
  last_start_ = 0;
}

std::vector<float> GpuGoldenBackend::forward(std::span<const int32_t> tokens, std::vector<float>* layer_streams) {
  last_start_ = state_.length;
  auto out = model_->forward(state_, tokens, layer_streams != nullptr);
  if (layer_streams != nullptr) *layer_streams = std::move(out.layer_streams);
  last_streams_ = std::move(out.final_streams);
  return std::move(out.logits);
}

std::vector<float> GpuGoldenBackend::mtp(std::span<const int32_t> next_ids) {
  DSV4_CHECK(!last_streams_.empty(), "MTP called before any trunk call");
  return model_->mtp_forward(state_, last_streams_, next_ids, last_start_);
}

}  // namespace dsv4::gpu
