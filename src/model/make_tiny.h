// Seed-deterministic random DeepSeek-V4 checkpoints in the real checkpoint format (spec §3.2,
// §3.3, §8 "Test protocol"): the names/dtypes/shapes of expected_tensors(cfg), FP8 and FP4
// weights quantized like DeepSeek's converter. Used for tests and the embedded tiny model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "model/model_config.h"

namespace dsv4::model {

// Weight masters (fp32, N(mean, std) drawn with std::mt19937_64 and a local Box–Muller, so
// identical on every standard library; each tensor has its own stream seeded from
// (seed, name), so tensors do not depend on each other):
//   embed.weight N(0, 1); *norm.weight 1 + N(0, 0.01) (BF16); attn_sink N(0, 1);
//   hc_*fn N(0, 0.01); hc_*base N(0, 0.1); hc_*scale 1 + N(0, 0.01); ape N(0, 0.1);
//   gate.bias N(0, 0.1); every other weight N(0, 0.02), except routed expert 0's w1/w3 in
//   every block, N(0, 0.8), so that some SwiGLU pre-activations exceed the clamp limit;
//   tid2eid rows = num_experts_per_tok distinct expert ids in [0, n_routed_experts).
// Returns a complete model.safetensors image. Calls cfg.validate().
std::vector<std::byte> make_tiny_checkpoint_bytes(const ModelConfig& cfg, uint64_t seed);

// Reads the config at config_path, copies that file verbatim to out_dir/config.json and
// writes out_dir/model.safetensors (out_dir is created if needed).
void write_tiny_checkpoint(const std::filesystem::path& config_path, uint64_t seed,
                           const std::filesystem::path& out_dir);

// FP8 block quantization of w [rows, cols] (row-major): for each 128x128 tile (ragged edges
// allowed) scale = 2^ceil(log2(amax / 448)) (amax floored so the scale stays >= 2^-126),
// weight[r, c] = e4m3(w[r, c] / scale), scale byte = E8M0 exponent.
// weight: [rows, cols] bytes; scale: [ceil(rows/128), ceil(cols/128)] bytes.
void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, uint8_t* weight,
                         uint8_t* scale);

// FP4 (MXFP4-style) quantization of w [rows, cols], cols a multiple of 32: for each row and
// 32 consecutive inputs scale = 2^ceil(log2(amax / 6)), nibble = e2m1(w / scale); element
// 2j goes to the low nibble of byte j, element 2j+1 to the high nibble.
// packed: [rows, cols/2] bytes; scale: [rows, cols/32] bytes.
void quantize_fp4_rows(const float* w, int64_t rows, int64_t cols, uint8_t* packed,
                       uint8_t* scale);

}  // namespace dsv4::model
