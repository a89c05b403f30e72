// `dsv4 logits`: runs the golden protocol (shared/golden/README.md "Protocol") on a backend.
//
// Per case: fresh state; prefill prompt_ids → row 0; then S teacher-forced decode calls
// feeding generated_ids[j-1] → row j. After every trunk call the MTP block runs on that
// call's final streams with the following tokens as ids → mtp row j.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "eval/golden_manifest.h"
#include "model/model_config.h"

namespace dsv4::eval {

// What the protocol needs from a backend. One sequence at a time; not thread-safe.
class GoldenBackend {
 public:
  virtual ~GoldenBackend() = default;
  virtual const model::ModelConfig& config() const = 0;
  virtual std::string name() const = 0;
  // Starts a fresh sequence (zeroed caches, trunk and MTP).
  virtual void reset() = 0;
  // Trunk call appending `tokens`; returns fp32 logits of the last position. When
  // layer_streams is non-null, fills it with [num_layers, hc, D] streams (last position).
  virtual std::vector<float> forward(std::span<const int32_t> tokens,
                                     std::vector<float>* layer_streams) = 0;
  // MTP block over the positions of the last trunk call, ids = the following tokens.
  virtual std::vector<float> mtp(std::span<const int32_t> next_ids) = 0;
};

// A float32 (or bf16-valued) output tensor.
struct OutputTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
  bool bf16 = false;  // written as BF16 (x_layers), else F32
};

using OutputTensors = std::map<std::string, OutputTensor>;

// Runs every case; progress(case_index, total) is called after each case when given.
OutputTensors run_golden_cases(GoldenBackend& backend, const GoldenManifest& manifest,
                               bool with_mtp, bool with_streams,
                               const std::function<void(int, int)>& progress = {});

// Writes the tensors as a safetensors file (F32, x_layers BF16).
void write_output_tensors(const OutputTensors& tensors, const std::string& path);

}  // namespace dsv4::eval
