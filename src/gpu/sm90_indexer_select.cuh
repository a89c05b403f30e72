// The selection half of indexer_topk (sm90_indexer_topk.h), shared by the scan's file and the
// selection's (sm90_indexer_select.cu). CUDA translation units only.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/sm90_indexer_topk.h"

namespace dsv4::gpu::sm90 {

// Row r's visible keys: visible[r], or (pos[r] + 1) / ratio.
__device__ __forceinline__ int row_visible(const IndexerArgs& a, int r) {
  return a.visible != nullptr ? a.visible[r] : (a.pos[r] + 1) / a.ratio;
}

// Launches the selection after the scan (PDL): reads the score keys [rows, stride] and the
// scan's `slices` 256-bin histogram slices per row, writes a.topk / a.count. probe: null, or
// [rows][kSelectProbeSlots] phase stamps (indexer_topk_probe).
void launch_indexer_select(const IndexerArgs& a, const uint16_t* keys, const uint32_t* hist, int slices,
                           long long* probe, cudaStream_t stream);

}  // namespace dsv4::gpu::sm90
