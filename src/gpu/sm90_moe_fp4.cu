// Host side of the grouped FP4 MoE (sm90_moe_fp4.cuh): workspace sizing, argument checks and
// the four launches. Shapes: P = T·k routed positions + T shared positions; chunks of ≤ 8
// positions per expert (the shared expert's listed twice), at most P/8 + E + 2 + ⌈T/8⌉.
#include "gpu/moe_grouped.h"

#include <atomic>

#include "gpu/sm90_moe_fp4.cuh"

namespace dsv4::gpu {
namespace {

size_t max_positions(const MoeGroupedShape& s) { return size_t(s.max_tokens) * (s.top_k + 1); }
// Routed and shared positions cut per expert, plus the shared chunks' second listing.
size_t max_chunks(const MoeGroupedShape& s) {
  const size_t shared_chunks = (size_t(s.max_tokens) + moe4::kTok - 1) / moe4::kTok;
  return max_positions(s) / moe4::kTok + size_t(s.experts) + 2 + shared_chunks;
}

// Phases 1/2 CTA shape (moe_grouped_set_pipeline).
std::atomic<int> g_pipeline{0};

template <moe4::GemmShape kS, bool kLoadOnly>
void set_smem_attr() {
  CUDA_CHECK(cudaFuncSetAttribute(moe4::moe_gemm_kernel<true, kS.warps, kS.stages, kLoadOnly>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, kS.smem()));
  CUDA_CHECK(cudaFuncSetAttribute(moe4::moe_gemm_kernel<false, kS.warps, kS.stages, kLoadOnly>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, kS.smem()));
}

template <moe4::GemmShape kS, bool kLoadOnly>
void launch_gemms(const moe4::Params& p, int grid, cudaStream_t stream) {
  moe4::moe_gemm_kernel<true, kS.warps, kS.stages, kLoadOnly><<<grid, kS.warps * 32, kS.smem(), stream>>>(p);
  CUDA_CHECK_LAUNCH();
  moe4::moe_gemm_kernel<false, kS.warps, kS.stages, kLoadOnly><<<grid, kS.warps * 32, kS.smem(), stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

// SMs of the current device; also sets the kernels' shared-memory limit, once per device
// (the attribute is per device: tensor-parallel ranks each need it).
int sm_count() {
  static std::once_flag flags[kMaxDevices];
  static int counts[kMaxDevices];
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  call_once_per_device(flags, [dev] {
    CUDA_CHECK(cudaDeviceGetAttribute(&counts[dev], cudaDevAttrMultiProcessorCount, dev));
    set_smem_attr<moe4::kShape8x4, false>();
    set_smem_attr<moe4::kShape11x3, false>();
    set_smem_attr<moe4::kShape8x4, true>();
    set_smem_attr<moe4::kShape11x3, true>();
  });
  return counts[dev];
}

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

}  // namespace

void MoeGroupedWorkspace::allocate(const MoeGroupedShape& s) {
  DSV4_CHECK(s.hidden % 256 == 0 && s.inter % 256 == 0, "grouped MoE: hidden ", s.hidden, " and inter ", s.inter,
             " must be multiples of 256");
  DSV4_CHECK(s.experts >= 1 && s.experts <= moe4::kMaxE, "grouped MoE: unsupported expert count ", s.experts);
  DSV4_CHECK(s.top_k >= 0 && s.top_k <= moe4::kMaxTopK, "grouped MoE: unsupported top_k ", s.top_k);
  DSV4_CHECK(s.max_tokens >= 1, "grouped MoE: max_tokens ", s.max_tokens);
  shape_ = s;
  const size_t T = s.max_tokens, P = max_positions(s), C = max_chunks(s);
  xq_.resize(T * s.hidden);
  xs_.resize(T * s.hidden / 128);
  pos_token_.resize(P);
  pos_weight_.resize(P);
  slot_pos_.resize(std::max<size_t>(1, T * s.top_k));
  chunks_.resize(C * sizeof(moe4::Chunk));
  num_chunks_.resize(1);
  h_.resize(P * s.inter);
  hq_.resize(P * s.inter);
  hs_.resize(P * s.inter / 128);
  arrive_.resize(C * s.inter / 128);
  arrive_.fill_bytes(0);
  y_.resize(P * s.hidden);
}

size_t MoeGroupedWorkspace::bytes() const {
  return xq_.bytes() + hq_.bytes() + chunks_.bytes() + xs_.bytes() + pos_weight_.bytes() + h_.bytes() + hs_.bytes() +
         y_.bytes() + pos_token_.bytes() + slot_pos_.bytes() + num_chunks_.bytes() + arrive_.bytes();
}

void moe_grouped_set_pipeline(int variant, bool allow_diagnostic) {
  DSV4_CHECK(variant >= 0 && variant <= 3, "grouped MoE: unknown pipeline variant ", variant);
  DSV4_CHECK(variant <= 1 || allow_diagnostic, "grouped MoE: pipeline variant ", variant,
             " streams weights without the math (wrong results); benchmarks pass allow_diagnostic");
  g_pipeline.store(variant, std::memory_order_relaxed);
}

void moe_grouped_forward(const MoeGroupedArgs& a, MoeGroupedWorkspace& ws, cudaStream_t stream) {
  const MoeGroupedShape& s = ws.shape_;
  DSV4_CHECK(a.tokens >= 0 && a.tokens <= s.max_tokens, "grouped MoE: ", a.tokens, " tokens, workspace holds ",
             s.max_tokens);
  if (a.tokens == 0) return;
  DSV4_CHECK(a.x && a.out && (s.top_k == 0 || (a.ids && a.weights && a.experts)), "grouped MoE: null argument");
  DSV4_CHECK(aligned(a.x, 16), "grouped MoE: x must be 16-byte aligned");
  const MoeExpertPtrs& sh = a.shared;
  if (sh.w1 != nullptr)
    DSV4_CHECK(aligned(sh.w1, 16) && aligned(sh.w3, 16) && aligned(sh.w2, 16) && sh.s1 && sh.s2 && sh.s3,
               "grouped MoE: shared expert pointers must be 16-byte aligned and non-null");
  moe4::Params p{};
  p.T = a.tokens;
  p.k = s.top_k;
  p.E = s.experts;
  p.D = s.hidden;
  p.I = s.inter;
  p.has_shared = sh.w1 != nullptr;
  p.limit = a.swiglu_limit;
  p.x = a.x;
  p.ids = a.ids;
  p.weights = a.weights;
  p.experts = reinterpret_cast<const moe4::ExpertPtrs*>(a.experts);
  p.shared = moe4::ExpertPtrs{sh.w1, sh.s1, sh.w3, sh.s3, sh.w2, sh.s2};
  p.xq = ws.xq_.get();
  p.xs = ws.xs_.get();
  p.pos_token = ws.pos_token_.get();
  p.pos_weight = ws.pos_weight_.get();
  p.slot_pos = ws.slot_pos_.get();
  p.chunks = reinterpret_cast<moe4::Chunk*>(ws.chunks_.get());
  p.num_chunks = ws.num_chunks_.get();
  p.h = ws.h_.get();
  p.hq = ws.hq_.get();
  p.hs = ws.hs_.get();
  p.arrive = ws.arrive_.get();
  p.y = ws.y_.get();
  p.out = a.out;
  const int grid = sm_count();
  moe4::moe_group_kernel<<<p.T + 1, 1024, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
  switch (g_pipeline.load(std::memory_order_relaxed)) {
    case 1: launch_gemms<moe4::kShape11x3, false>(p, grid, stream); break;
    case 2: launch_gemms<moe4::kShape8x4, true>(p, grid, stream); break;
    case 3: launch_gemms<moe4::kShape11x3, true>(p, grid, stream); break;
    default: launch_gemms<moe4::kShape8x4, false>(p, grid, stream);
  }
  moe4::moe_combine_kernel<<<p.T, 256, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
