// The exact tensor set of a DeepSeek-V4 checkpoint for a given config (spec §3.2), and a
// checker that compares a checkpoint against it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/dtype.h"
#include "model/model_config.h"

namespace dsv4::model {

struct ExpectedTensor {
  std::string name;
  checkpoint::DType dtype;
  std::vector<int64_t> shape;
};

// Every tensor of the checkpoint, in this order: globals (embed, head, norm, hc_head_*), then
// layers.0 .. layers.{n-1}, then mtp.0 .. Formats:
//   fp8(o, i) = <w>.weight F8_E4M3 [o, i] + <w>.scale F8_E8M0 [ceil(o/128), ceil(i/128)]
//   fp4(o, i) = <w>.weight I8 [o, i/2]    + <w>.scale F8_E8M0 [o, i/32]
// Routed experts are fp4 when expert_dtype == "fp4", else fp8. tid2eid is listed as I64
// (verify_checkpoint also accepts I32). Assumes cfg.validate() passed.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& cfg);

// Total bytes of expected_tensors(cfg) (tid2eid counted as I64).
uint64_t expected_bytes(const std::vector<ExpectedTensor>& tensors);

// Throws one dsv4::Error listing up to 20 problems (then "and N more"), each naming the file
// and the tensor: missing tensors, unexpected tensors, wrong shapes, wrong dtypes.
void verify_checkpoint(const checkpoint::Checkpoint& ckpt, const ModelConfig& cfg);

}  // namespace dsv4::model
