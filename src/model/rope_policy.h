// The per-layer RoPE policy of DeepSeek-V4 (spec §4.7, pitfall §7.1): window-only layers
// (compress ratio 0: the first layers and the MTP block) use rope_theta without YaRN;
// compressed layers (CSA/HCA) use compress_rope_theta with the config's YaRN scaling, for
// queries, window KV, compressed KV and the indexer alike.
#pragma once

#include "model/model_config.h"
#include "numerics/rope.h"

namespace dsv4::model {

// RoPE parameters of a layer kind: compressed = (compress ratio > 0).
numerics::RopeParams rope_params(const ModelConfig& config, bool compressed);

}  // namespace dsv4::model
