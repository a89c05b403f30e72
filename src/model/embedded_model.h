// The built-in tiny DeepSeek-V4: spec §8 tiny-C4 (compress_ratios [0, 4, 128, 4, 0]: SWA+hash,
// CSA, HCA, CSA trunk layers plus one SWA MTP block) with the full 129280-token vocabulary,
// hidden 128, index_n_heads 2, index_topk 4, max_position_embeddings 4096, sliding_window 128.
// Lets the engine, server and tokenizer paths run without any files (~70 MB in memory).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"

namespace dsv4::model {

// Its config.json (passes ModelConfig::from_json).
nlohmann::json embedded_tiny_config_json();

// Checkpoint::from_buffer(make_tiny_checkpoint_bytes(config, seed), "<embedded tiny model>").
checkpoint::Checkpoint embedded_tiny_checkpoint(uint64_t seed = 0);

}  // namespace dsv4::model
