// Grouped FP4 MoE on sm_90a (spec §4.8): host launcher API for sm90_moe_fp4.cu.
//
// One call runs a whole MoE layer's expert part for T tokens whose routing (top-k expert ids
// and fp32 weights) is already on the device: Q8 of x, grouping by expert (histogram,
// offsets, permutation on the GPU, no host sync), gate+up with fused clamped SwiGLU, routing
// weight and Q8, down projection, the shared expert (FP8) and the combine
//   out = bf16( Σ_{ascending expert id} y_e + shared(x) ).
// Four launches, all sized from T and the preallocated workspace only (CUDA-graph capturable).
// Numerics are cpu::moe_forward's expert math (Lin4 / Lin8 with the reference rounding points).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda_check.h"

namespace dsv4::gpu {

// Device pointers of one expert's matrices in the checkpoint layout.
//   routed (FP4): w1, w3 I8 [I, D/2], w2 [D, I/2], low nibble first; s1, s3 E8M0 [I, D/32],
//                 s2 [D, I/32].
//   shared (FP8): w1, w3 e4m3 [I, D], w2 [D, I]; scales E8M0 [ceil(out/128), ceil(in/128)].
// Every pointer must be 16-byte aligned (the scales 8-byte aligned).
struct MoeExpertPtrs {
  const uint8_t *w1 = nullptr, *s1 = nullptr, *w3 = nullptr, *s3 = nullptr, *w2 = nullptr, *s2 = nullptr;
};

struct MoeGroupedShape {
  int max_tokens = 256;
  int hidden = 4096;   // D, multiple of 256
  int inter = 2048;    // I, multiple of 256
  int experts = 256;   // E ≤ 1023
  int top_k = 6;       // ≤ 16 (0: shared expert only)
};

struct MoeGroupedArgs;

// Workspace for up to shape.max_tokens tokens; allocated once (nothing depends on the routing).
class MoeGroupedWorkspace {
 public:
  MoeGroupedWorkspace() = default;
  explicit MoeGroupedWorkspace(const MoeGroupedShape& shape) { allocate(shape); }
  void allocate(const MoeGroupedShape& shape);
  const MoeGroupedShape& shape() const { return shape_; }
  size_t bytes() const;

 private:
  friend void moe_grouped_forward(const MoeGroupedArgs&, MoeGroupedWorkspace&, cudaStream_t);
  MoeGroupedShape shape_;
  DeviceBuffer<uint8_t> xq_, hq_, chunks_;
  DeviceBuffer<float> xs_, pos_weight_, h_, hs_, y_;
  DeviceBuffer<int> pos_token_, slot_pos_, num_chunks_;
  DeviceBuffer<unsigned> arrive_;
};

struct MoeGroupedArgs {
  int tokens = 0;                           // T ≤ workspace max_tokens
  const float* x = nullptr;                 // [T, D] bf16 values (after ffn_norm)
  const int32_t* ids = nullptr;             // [T, top_k] expert ids (any order; repeats allowed)
  const float* weights = nullptr;           // [T, top_k] routing weights (fp32)
  const MoeExpertPtrs* experts = nullptr;   // [E] device array of routed experts (FP4)
  MoeExpertPtrs shared;                     // shared expert (FP8); w1 == nullptr: none
  float swiglu_limit = 10.0f;               // 0 = no clamp
  float* out = nullptr;                     // [T, D] bf16 values
};

// Enqueues the four launches on `stream`; returns immediately.
void moe_grouped_forward(const MoeGroupedArgs& args, MoeGroupedWorkspace& ws, cudaStream_t stream);

// Tuning knob for benchmarks (process-wide, read at enqueue time): CTA shape of the two GEMM
// launches — 0: 8 warps × 4-stage rings (default), 1: 11 warps × 3-stage rings; 2 and 3:
// the same two streaming the weights without the math (diagnostic only: wrong results, so
// refused unless allow_diagnostic).
void moe_grouped_set_pipeline(int variant, bool allow_diagnostic = false);

}  // namespace dsv4::gpu
