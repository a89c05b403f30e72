// Grouped FP4 MoE on sm_90a (spec §4.8): host launcher API for sm90_moe_fp4.cu.
//
// One call runs a whole MoE layer's expert part for T tokens whose routing (top-k expert ids
// and fp32 weights) is already on the device: Q8 of x, grouping by expert (histogram,
// offsets, permutation on the GPU, no host sync), gate+up with fused clamped SwiGLU, routing
// weight and Q8, down projection, the shared expert (FP8) and the combine
//   out = bf16( Σ_{ascending expert id} y_e + shared(x) ).
// Four launches (seven for calls on the wide kernels: the shared expert's gemms apart, and h's Q8
// between gate+up and down), all sized from T and the preallocated workspace only (CUDA-graph
// capturable);
// inside a PdlScope they use programmatic dependent launch (pdl.h), the gemm kernels starting
// their first weight copies before the previous launch finishes.
// Numerics are cpu::moe_forward's expert math (Lin4 / Lin8 with the reference rounding points),
// with the FP8 tensor core's (wgmma) sum of each 32-K block in place of the exact fp32 sum of its
// products (on H200 it keeps fewer bits, as in the reference's own FP8 kernels): tolerance-equal
// to the CPU (moe_grouped_test states the bound), deterministic, and a token's result does not
// depend on the other tokens of the call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda_check.h"

namespace dsv4::gpu {

// Device pointers of one expert's matrices (this rank's part: I = its intermediate rows), in
// the stage-tile layout below (moe_repack_experts writes it from the checkpoint layout).
//   routed (FP4): w1, w3 [I, D/2] bytes, w2 [D, I/2], low nibble first; s1, s3 E8M0 [I, D/32],
//                 s2 [D, I/32].
//   shared (FP8): w1, w3 e4m3 [I, D], w2 [D, I]; scales E8M0 [ceil(out/128), ceil(in/128)].
// Every pointer must be 16-byte aligned (the scales 8-byte aligned).
//
// Stage-tile layout (what the kernels stream; same bytes and sizes as the checkpoint's, so
// per-expert offsets into contiguous [E, ...] tensors are unchanged). A weight matrix of R rows
// and row_bytes bytes (FP4: in/2, FP8: in) is cut into tiles of h rows and K stages of 256
// inputs (rb = 128 B of a row for FP4, 256 B for FP8). Block (tile i, stage s) is h·rb
// contiguous bytes at offset (i·S + s)·h·rb, S = row_bytes/rb, so a tile's whole K is one run;
// inside a block, row r's 16-byte granule j sits at r·rb + (j ^ (r & 7))·16 (the kernels'
// shared-memory swizzle, so a stage lands in shared memory as a straight copy).
//   h: routed w1, w3 16 and w2 32; shared w1, w3 8 and w2 16. One stage of a warp item is then
//   4 KB: 2 KB of w1 + 2 KB of w3 (gate+up), or 4 KB of w2 (down).
//   FP4 row scales [R, in/32]: the same tiles and stages, block (i, s) = h rows × 8 bytes
//   (row-major, at (i·S + s)·h·8). FP8 block scales stay in the checkpoint layout.
// Only the grouped kernels read this layout (GpuModel's reference MoE path reads the
// checkpoint layout: weights are repacked only where the grouped path runs).
struct MoeExpertPtrs {
  const uint8_t *w1 = nullptr, *s1 = nullptr, *w3 = nullptr, *s3 = nullptr, *w2 = nullptr, *s2 = nullptr;
};

// Rewrites, in place on `stream`, checkpoint-layout weights into the stage-tile layout, once at
// load (GpuWeights, after a layer's expert upload or dummy fill; tests and benchmarks after
// building theirs). routed: `count` routed experts stored contiguously per matrix (expert e's
// w1 at routed.w1 + e·I·D/2, s1 at routed.s1 + e·I·D/32, ... as GpuWeights' ExpertsW; count 1
// for one expert's own buffers; 0 or routed.w1 == nullptr: none). shared: the FP8 shared
// expert (w1 == nullptr: none). hidden = D and inter = I (this rank's part) multiples of 256.
// A pure byte permutation per matrix; returns once the stream is idle (uses a temporary
// device buffer of at most 64 MiB). Not graph-capturable (load time only).
void moe_repack_experts(const MoeExpertPtrs& routed, int64_t count, const MoeExpertPtrs& shared, int hidden,
                        int inter, cudaStream_t stream);

// Whether the grouped kernels serve these shapes (GpuModel falls back to its reference MoE
// otherwise): hidden and this rank's inter multiples of 256, experts ≤ 1023, top_k ≤ 16.
inline bool moe_grouped_supports(int64_t hidden, int64_t inter, int64_t experts, int64_t top_k) {
  return hidden % 256 == 0 && inter % 256 == 0 && experts >= 1 && experts <= 1023 && top_k >= 0 && top_k <= 16;
}

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
  DeviceBuffer<float> xs_, pos_weight_, h_, hs_, y_, xr_, hr_;
  DeviceBuffer<int> pos_token_, slot_pos_, num_chunks_;
  DeviceBuffer<unsigned> arrive_, sync1_;
  // T and shared expert (or not) of the last group launch enqueued on it (diagnostics 16 / 17)
  int grouped_tokens_ = 0;
  bool grouped_shared_ = false;
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

// Enqueues the launches on `stream`; returns immediately. The expert weights must be in
// the stage-tile layout (moe_repack_experts).
void moe_grouped_forward(const MoeGroupedArgs& args, MoeGroupedWorkspace& ws, cudaStream_t stream);

// Tuning knob for benchmarks (process-wide, read at enqueue time): CTA shape of the GEMM
// launches — 0 (default): 16 warps × 2-stage rings from 2 tokens, 8 × 4 at 1, 8 from 640, 12 from
// 896 tokens, 9 from 3072; 1: 12 warps × 3-stage rings; 4: 16 × 2; 7: 8 × 4; 18: one-token calls
// (T = 1, top_k ≤ 8) in one launch with 8 × 4's items (others as 7); 19: the same in two
// launches, gate+up then down (others as 7); 8: 8 × 4
// with chunks of 32 tokens; 9: the wide kernels (chunks of 128 tokens, two warpgroups per CTA on
// one chunk; sm90_moe_wide.cuh); 12: the wide kernels with chunks of 64 tokens (one column half).
// Every variant gives the same bits. Diagnostics (wrong results, so refused
// unless allow_diagnostic): 2, 3 and 5 stream the weights of 8 × 4, 12 × 3 and 16 × 2 without the
// math; 6 runs 8 × 4's math without the weight copies; 10 / 11: the wide kernels' copies without
// the math / math without the copies; 16 / 17: 8 × 4 without the group launch (17: nor the combine
// launch), on the lists a previous call of the same T (and shared expert or not) left in the
// workspace — what the launch costs in the chain; 20 / 21: 18 streaming the weights without the
// math / with neither. 22: 18 with its routed gate+up and down bodies run dry before the grid
// dependency (their code fetched while the previous kernel runs). 23: 18's items with the CTA's
// two warpgroups in fixed roles — gate+up, and down with 7-stage rings, most of its weights in
// before h is ready; 24: 23 with 22's dry passes; 25: 23 with h's Q8 done by the down items
// (I ≤ 2048, else 7). The environment variable DSV4_MOE_VARIANT
// (read once) picks a variant with right results for every call that this knob leaves at 0
// (A/B runs of the whole model).
void moe_grouped_set_pipeline(int variant, bool allow_diagnostic = false);

// Benchmarks: the one-token launches (variants 18–25) stamp globaltimer ns into device_buf,
// kMoeProbeEvents a warpgroup ([2 · SMs][kMoeProbeEvents]): 0 entry, 1 plan read, 2 x quantized,
// 3 gate+up done, 4 h ready for the first down item, 5 down done, 6 exit, 7 ([0][7] only) the last
// 128-row block combined; a gate+up item's 8..12 stages 0 / 4 / 8 / 12 / last in, 13 epilogue
// done, 14 h stored, 15 block counter added. 0 = not reached, so clear it first. nullptr (the
// default): off. Process-wide, read at enqueue time.
constexpr int kMoeProbeEvents = 16;
void moe_grouped_set_probe(unsigned long long* device_buf);

}  // namespace dsv4::gpu
