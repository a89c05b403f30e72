// GpuModel's scratch buffers (internal to gpu_model.cpp / gpu_model_decode.cpp).
//
// Buffers grow on demand (`grow`); their contents never outlive one call. GpuModel keeps two:
// the eager one (forward, mtp_forward, eager decode) and the CUDA-graph one, sized once for
// the largest captured decode batch before the first capture and never grown afterwards
// (a captured graph holds its addresses).
#pragma once

#include <algorithm>
#include <cstdint>

#include "gpu/cuda_check.h"
#include "gpu/decode_ops.h"
#include "gpu/gpu_model.h"

namespace dsv4::gpu {

template <class T>
T* grow(DeviceBuffer<T>& b, int64_t count) {
  b.reserve(static_cast<size_t>(std::max<int64_t>(count, 1)));
  return b.get();
}

struct GpuModel::Workspace {
  DeviceBuffer<int32_t> ids, eids, esel, sel, sel_count;
  DeviceBuffer<float> streams, mixed, x, post, comb, mixes, sub;
  DeviceBuffer<uint8_t> qa, qb, xq;  // xq/xs: Q8 of the attention input x (mHC pre writes it)
  DeviceBuffer<float> sa, sb, xs;
  DeviceBuffer<float> tq, q, tkv, kv, attn, z, cproj_kv, cproj_sc, iproj_kv, iproj_sc, iq, iw, scores;
  DeviceBuffer<uint16_t> wo_a_wide;  // an FP8 wo_a widened to bf16 for calls above kDenseFp8MaxRows rows
  DeviceBuffer<uint16_t> attn16;     // decode: attn as bf16 for an FP8 wo_a, and its exactness flags
  DeviceBuffer<int32_t> attn16_exact;
  DeviceBuffer<float> craw;  // the attention compressor's raw entries before the FP8 encode
  DeviceBuffer<float> ewts, g, u, h, routed, sg, su, sh, shared_out;
  DeviceBuffer<float> head_mix, head_y, head_n, head_logits, mtp_in, emb, embn, pe, hn, ph;
  DeviceBuffer<uint8_t> decode_in;  // decode step inputs: cache table, positions, token ids
  DeviceBuffer<uint8_t> index_ws, attn_ws;  // decode_index / decode_attend workspaces
  DeviceBuffer<double> hc_parts;            // small_out_linear partial sums (mHC projections)
  DeviceBuffer<double> router_parts;        // moe_router's per-chunk logit partials
  // sm_90a prefill: row positions, the linear window pool (FP8) and the ring rows it copies.
  DeviceBuffer<int32_t> prefill_pos;
  DeviceBuffer<uint8_t> prefill_window;
  DeviceBuffer<float> prefill_ring_rows;
};

// Device view of one decode step's inputs (Workspace::decode_in), rows = batch incl. padding.
struct GpuModel::DecodeStep {
  int64_t rows = 0;
  const int32_t* ids = nullptr;              // [rows] token ids
  const int32_t* pos = nullptr;              // [rows] position of the new token
  const DecodeLayerCache* caches = nullptr;  // [num_layers, rows] per-sequence cache pointers
  int64_t pos_bound = 0;                     // host upper bound of every pos + 1 (grid sizes)
};

// One captured decode graph; replays read the inputs staged into graph_ws_->decode_in.
struct GpuModel::DecodeGraph {
  int batch = 0;
  cudaGraphExec_t exec = nullptr;
};

}  // namespace dsv4::gpu
