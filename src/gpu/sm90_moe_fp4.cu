// Host side of the grouped FP4 MoE (sm90_moe_fp4.cuh): workspace sizing, argument checks and
// the four launches. Shapes: P = T·k routed positions + T shared positions; chunks of ≤ 8 (or
// 32) positions per expert (the shared expert's listed twice), at most P/8 + E + 2 + ⌈T/8⌉.
#include "gpu/moe_grouped.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <utility>

#include "gpu/sm90_moe_fp4.cuh"
#include "gpu/sm90_moe_gemm.cuh"
#include "gpu/sm90_moe_group.cuh"
#include "gpu/sm90_moe_one_token.cuh"
#include "gpu/sm90_moe_one_token_roles.cuh"
#include "gpu/sm90_moe_wide.cuh"

namespace dsv4::gpu {
namespace {

size_t max_positions(const MoeGroupedShape& s) { return size_t(s.max_tokens) * (s.top_k + 1); }
// Routed and shared positions cut per expert, plus the shared chunks' second listing.
size_t max_chunks(const MoeGroupedShape& s) {
  const size_t shared_chunks = (size_t(s.max_tokens) + moe4::kTok - 1) / moe4::kTok;
  return max_positions(s) / moe4::kTok + size_t(s.experts) + 2 + shared_chunks;
}

// Phases 1/2 CTA shape (moe_grouped_set_pipeline): variants 0..kMaxVariant, the diagnostics
// (wrong results) among them.
std::atomic<int> g_pipeline{0};
std::atomic<unsigned long long*> g_probe{nullptr};
constexpr int kMaxVariant = 25;
static_assert(moe4::kProbeEvents == kMoeProbeEvents, "the probe layout of moe_grouped.h");
bool is_diagnostic(int v) { return v == 2 || v == 3 || v == 5 || v == 6 || v == 10 || v == 11 || (v >= 13 && v <= 17) || v == 20 || v == 21; }

template <moe4::GemmShape kS, int kDiag>
void set_smem_attr() {
  CUDA_CHECK(cudaFuncSetAttribute(moe4::moe_gemm_kernel<true, kS.warps, kS.stages, kDiag, kS.tokens>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, kS.smem()));
  CUDA_CHECK(cudaFuncSetAttribute(moe4::moe_gemm_kernel<false, kS.warps, kS.stages, kDiag, kS.tokens>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, kS.smem()));
}

// launch_pdl: programmatic dependent launch inside a PdlScope (GpuModel's small decode
// passes), a plain stream-ordered launch otherwise.
// (p.chunk_tokens must be kS.tokens: the group launch cut the chunks.)
template <moe4::GemmShape kS, int kDiag>
void launch_gemms(const moe4::Params& p, int grid, cudaStream_t stream) {
  launch_pdl(moe4::moe_gemm_kernel<true, kS.warps, kS.stages, kDiag, kS.tokens>, dim3(grid), dim3(kS.warps * 32),
             kS.smem(), stream, p);
  launch_pdl(moe4::moe_gemm_kernel<false, kS.warps, kS.stages, kDiag, kS.tokens>, dim3(grid), dim3(kS.warps * 32),
             kS.smem(), stream, p);
}

template <int kDiag, int NW = moe4::kWideN>
void set_wide_smem_attr() {
  using namespace moe4;
  for (const void* f : {reinterpret_cast<const void*>(moe_wide_kernel<true, true, kDiag, NW>),
                        reinterpret_cast<const void*>(moe_wide_kernel<true, false, kDiag, NW>),
                        reinterpret_cast<const void*>(moe_wide_kernel<false, true, kDiag, NW>),
                        reinterpret_cast<const void*>(moe_wide_kernel<false, false, kDiag, NW>)})
    CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kWideSmem));
}

// The wide kernels (chunks of NW tokens): per phase the shared expert's chunks, then the routed
// ones.
template <int kDiag, int NW = moe4::kWideN>
void launch_wide(const moe4::Params& p, int grid, cudaStream_t stream) {
  const int shared_items = p.has_shared ? moe4::shared_chunks(p.T, NW) / 2 : 0;
  for (const bool up : {true, false}) {
    const int sgrid = std::min(grid, shared_items * (up ? p.I / 64 : p.D / 128));
    if (sgrid > 0)
      launch_pdl(up ? moe4::moe_wide_kernel<true, true, kDiag, NW> : moe4::moe_wide_kernel<false, true, kDiag, NW>,
                 dim3(sgrid), dim3(256), moe4::kWideSmem, stream, p);
    launch_pdl(up ? moe4::moe_wide_kernel<true, false, kDiag, NW> : moe4::moe_wide_kernel<false, false, kDiag, NW>,
               dim3(grid), dim3(256), moe4::kWideSmem, stream, p);
    if (up) {  // h's Q8 and stage records (moe_h_q8_kernel)
      const int npos = p.T * p.k + (p.has_shared ? p.T : 0);
      launch_pdl(moe4::moe_h_q8_kernel, dim3(unsigned(npos)), dim3(32 * std::min(p.I / 128, 16)), 0, stream, p);
    }
  }
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
    using namespace moe4;
    set_smem_attr<kShape8x4, kDiagNone>();
    set_smem_attr<kShape12x3, kDiagNone>();
    set_smem_attr<kShape16x2, kDiagNone>();
    set_smem_attr<kShape8x4, kDiagLoadOnly>();
    set_smem_attr<kShape12x3, kDiagLoadOnly>();
    set_smem_attr<kShape16x2, kDiagLoadOnly>();
    set_smem_attr<kShape8x4, kDiagMathOnly>();
    set_smem_attr<kShape8x4, kDiagSkeleton>();
    set_smem_attr<kShape16x2, kDiagMathOnly>();
    set_smem_attr<kShape16x2, kDiagSkeleton>();
    set_smem_attr<kShape8x4Wide, kDiagNone>();
    set_wide_smem_attr<kDiagNone>();
    set_wide_smem_attr<kDiagLoadOnly>();
    set_wide_smem_attr<kDiagMathOnly>();
    set_wide_smem_attr<kDiagNone, kWideHalfN>();
    constexpr int kW = kShape8x4.warps, kN = kShape8x4.stages;
    for (const void* f : {reinterpret_cast<const void*>(moe_one_token_kernel<kW, kN, kOneTokenAll>),
                          reinterpret_cast<const void*>(moe_one_token_kernel<kW, kN, kOneTokenUp>),
                          reinterpret_cast<const void*>(moe_one_token_kernel<kW, kN, kOneTokenDown>),
                          reinterpret_cast<const void*>(moe_one_token_kernel<kW, kN, kOneTokenAll, kDiagLoadOnly>),
                          reinterpret_cast<const void*>(moe_one_token_kernel<kW, kN, kOneTokenAll, kDiagSkeleton>),
                          reinterpret_cast<const void*>(moe_one_token_kernel<kW, kN, kOneTokenAll, kDiagNone, true>)})
      CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kShape8x4.smem()));
    for (const auto& [f, q8_down] : {std::pair{reinterpret_cast<const void*>(moe_one_token_roles_kernel<false>), false},
                                     std::pair{reinterpret_cast<const void*>(moe_one_token_roles_kernel<true>), false},
                                     std::pair{reinterpret_cast<const void*>(moe_one_token_roles_kernel<false, true>), true}})
      CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, roles_smem(q8_down)));
  });
  return counts[dev];
}

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

// Stage-tile repack (layout in moe_grouped.h), src → dst (distinct buffers), over `rows` rows
// (a multiple of h) of row16 16-byte granules each, stages of rb16 granules.
//   dst granule ((i·S + s)·h + r)·rb16 + q  ←  src granule (i·h + r)·row16 + s·rb16 + (q ^ (r & 7)).
__global__ void repack_rows_kernel(uint4* dst, const uint4* src, int64_t rows, int row16, int h, int rb16) {
  const int S = row16 / rb16;
  const int64_t n = rows * row16;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t blk = o / (h * rb16);
    const int rem = int(o - blk * h * rb16), r = rem / rb16, q = rem - r * rb16;
    const int64_t i = blk / S;
    const int s = int(blk - i * S);
    dst[o] = src[(i * h + r) * row16 + int64_t(s) * rb16 + (q ^ (r & 7))];
  }
}
// FP4 row scales: 8-byte units (one 256-K stage of a row): dst unit (i·S + s)·h + r ← src (i·h + r)·S + s.
__global__ void repack_scales_kernel(uint2* dst, const uint2* src, int64_t rows, int S, int h) {
  const int64_t n = rows * S;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t blk = o / h;
    const int r = int(o - blk * h);
    const int64_t i = blk / S;
    const int s = int(blk - i * S);
    dst[o] = src[(i * h + r) * S + s];
  }
}

// In-place repack of a [rows, row_bytes] array through `scratch`, rows cut at multiples of h.
// unit = 16 (weights: swizzled stage tiles, stage = stage_bytes) or 8 (FP4 scales).
void repack_in_place(uint8_t* data, int64_t rows, int64_t row_bytes, int h, int stage_bytes, int unit,
                     DeviceBuffer<uint8_t>& scratch, cudaStream_t stream) {
  DSV4_CHECK(rows % h == 0 && row_bytes % stage_bytes == 0 && reinterpret_cast<uintptr_t>(data) % unit == 0,
             "grouped MoE repack: ", rows, " rows of ", row_bytes, " B do not cut into ", h, "-row tiles of ",
             stage_bytes, " B stages (or misaligned)");
  const int64_t step = std::max<int64_t>(h, int64_t(scratch.size()) / row_bytes / h * h);
  DSV4_CHECK(step * row_bytes <= int64_t(scratch.size()), "grouped MoE repack: scratch too small");
  for (int64_t r0 = 0; r0 < rows; r0 += step) {
    const int64_t n = std::min(step, rows - r0);
    uint8_t* p = data + r0 * row_bytes;
    CUDA_CHECK(cudaMemcpyAsync(scratch.get(), p, size_t(n * row_bytes), cudaMemcpyDeviceToDevice, stream));
    const int64_t units = n * row_bytes / unit;
    const unsigned blocks = unsigned(std::min<int64_t>((units + 255) / 256, 4096));
    if (unit == 16)
      repack_rows_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<uint4*>(p),
                                                     reinterpret_cast<const uint4*>(scratch.get()), n,
                                                     int(row_bytes / 16), h, stage_bytes / 16);
    else
      repack_scales_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<uint2*>(p),
                                                       reinterpret_cast<const uint2*>(scratch.get()), n,
                                                       int(row_bytes / stage_bytes), h);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void MoeGroupedWorkspace::allocate(const MoeGroupedShape& s) {
  DSV4_CHECK(s.hidden % 256 == 0 && s.inter % 256 == 0, "grouped MoE: hidden ", s.hidden, " and inter ", s.inter,
             " must be multiples of 256");
  DSV4_CHECK(s.experts >= 1 && s.experts <= moe4::kMaxE, "grouped MoE: unsupported expert count ", s.experts);
  DSV4_CHECK(s.top_k >= 0 && s.top_k <= moe4::kMaxTopK, "grouped MoE: unsupported top_k ", s.top_k);
  DSV4_CHECK(s.max_tokens >= 1, "grouped MoE: max_tokens ", s.max_tokens);
  shape_ = s;
  const size_t T = s.max_tokens, P = max_positions(s), C = max_chunks(s);
  // x's codes: T rows, and at least one row per SM (the one-token launch's per-CTA copies).
  const size_t xrows = std::max<size_t>(T, size_t(sm_count()));
  // The wide kernels address xq / hq rows by 32-bit byte offsets.
  DSV4_CHECK(T * s.hidden < (size_t{1} << 31) && P * s.inter < (size_t{1} << 31), "grouped MoE: ", s.max_tokens,
             " tokens make the Q8 activation arrays 2 GiB or more");
  xq_.resize(xrows * s.hidden);
  xs_.resize(xrows * s.hidden / 128);
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
  xr_.resize(T * s.hidden / 64);
  hr_.resize(P * s.inter / 64);
  sync1_.resize(moe4::kOneTokenRows + s.hidden / 128 + 1);
  sync1_.fill_bytes(0);
}

size_t MoeGroupedWorkspace::bytes() const {
  return xq_.bytes() + hq_.bytes() + chunks_.bytes() + xs_.bytes() + pos_weight_.bytes() + h_.bytes() + hs_.bytes() +
         y_.bytes() + xr_.bytes() + hr_.bytes() + pos_token_.bytes() + slot_pos_.bytes() + num_chunks_.bytes() + arrive_.bytes() +
         sync1_.bytes();
}

void moe_repack_experts(const MoeExpertPtrs& routed, int64_t count, const MoeExpertPtrs& shared, int hidden,
                        int inter, cudaStream_t stream) {
  DSV4_CHECK(hidden % 256 == 0 && inter % 256 == 0, "grouped MoE repack: hidden ", hidden, " and inter ", inter,
             " must be multiples of 256");
  const int64_t D = hidden, I = inter;
  const bool has_routed = count > 0 && routed.w1 != nullptr, has_shared = shared.w1 != nullptr;
  if (!has_routed && !has_shared) return;
  // Scratch: at most 64 MiB, at least one tile row band of the widest matrix.
  const int64_t need = std::max(has_routed ? count * I * D / 2 : 0, has_shared ? I * D : 0);
  const int64_t scratch_bytes = std::max<int64_t>(std::min<int64_t>(need, int64_t(64) << 20), 32 * std::max(D, I));
  DeviceBuffer<uint8_t> scratch(static_cast<size_t>(scratch_bytes));
  auto mut = [](const uint8_t* p) { return const_cast<uint8_t*>(p); };
  if (has_routed) {  // FP4: w1/w3 [count·I, D/2] tiles of 16 rows, w2 [count·D, I/2] tiles of 32
    for (const uint8_t* w : {routed.w1, routed.w3})
      repack_in_place(mut(w), count * I, D / 2, 16, 128, 16, scratch, stream);
    for (const uint8_t* s : {routed.s1, routed.s3})
      repack_in_place(mut(s), count * I, D / 32, 16, 8, 8, scratch, stream);
    repack_in_place(mut(routed.w2), count * D, I / 2, 32, 128, 16, scratch, stream);
    repack_in_place(mut(routed.s2), count * D, I / 32, 32, 8, 8, scratch, stream);
  }
  if (has_shared) {  // FP8: w1/w3 [I, D] tiles of 8 rows, w2 [D, I] tiles of 16; block scales as they are
    for (const uint8_t* w : {shared.w1, shared.w3})
      repack_in_place(mut(w), I, D, 8, 256, 16, scratch, stream);
    repack_in_place(mut(shared.w2), D, I, 16, 256, 16, scratch, stream);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));  // before the scratch goes
}

void moe_grouped_set_probe(unsigned long long* device_buf) { g_probe.store(device_buf, std::memory_order_relaxed); }

void moe_grouped_set_pipeline(int variant, bool allow_diagnostic) {
  DSV4_CHECK(variant >= 0 && variant <= kMaxVariant, "grouped MoE: unknown pipeline variant ", variant);
  DSV4_CHECK(!is_diagnostic(variant) || allow_diagnostic, "grouped MoE: pipeline variant ", variant,
             " is a diagnostic (wrong results); benchmarks pass allow_diagnostic");
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
  p.xr = ws.xr_.get();
  p.hr = ws.hr_.get();
  p.sync1 = ws.sync1_.get();
  p.probe = g_probe.load(std::memory_order_relaxed);
  p.out = a.out;
  const int grid = sm_count();
  // Default: 16 warps × 2-stage rings from 2 tokens (H200: −9 % at T=2 and T=4, −8 % at T=8,
  // −12 % at T=256 against 8 × 4), 8 × 4 at T = 1 (−4 %: its 4-deep rings carry the shared
  // expert's few items; docs/moe-grouped.md rounds 5 and 18). From 640 to 895 tokens: 8 × 4 with
  // chunks of 32 tokens (variant 8; H200, T = 640 / 768 uniform: 2081 / 2236 µs against 2635 /
  // 2865 for 16 × 2, skewed 2454 / 2683 against 2406 / 2746; round 18). From 896: variant 12.
  // From 3072 tokens: the wide kernels, chunks of 128 tokens (variant 9, sm90_moe_wide.cuh; H200,
  // T = 3072 / 4096 / 8192 against variant 8 — 8 × 4 with chunks of 32 tokens: 5485 / 5922 /
  // 11646 µs vs 7266 / 9415 / 18110). From 896 to 3071: the same kernels with chunks of 64 tokens
  // (variant 12, one column half; H200, nineteenth session, T = 1024 / 1536 / 2048: 2464 / 2654 /
  // 2870 µs against 2612 / 4095 / 5017 for variant 8 and 3559 / 3740 / 3926 for variant 9).
  // DSV4_MOE_VARIANT=v (A/B runs of the model): a variant with right results in place of the default.
  static const int env_variant = [] {
    const char* e = std::getenv("DSV4_MOE_VARIANT");
    const int v = e ? std::atoi(e) : 0;
    DSV4_CHECK(v >= 0 && v <= kMaxVariant && !is_diagnostic(v), "DSV4_MOE_VARIANT=", e ? e : "",
               ": not a pipeline variant with right results (0..", kMaxVariant, ")");
    return v;
  }();
  int variant = g_pipeline.load(std::memory_order_relaxed);
  if (variant == 0) variant = env_variant;
  if (variant == 0)
    variant = p.T >= 3072 ? 9 : p.T >= 896 ? 12 : p.T >= 640 ? 8 : p.T >= 2 ? 4 : 7;
  // Variant 18 (the one-token launch, sm90_moe_one_token.cuh, 8 warps × 4-stage rings) serves
  // T = 1 with k ≤ 8; other calls run 7, its CTA shape. Not the default: in the model (code
  // evicted between layers) it is ~2–3 µs a layer slower: its code comes from HBM behind the
  // weight stream (docs/moe-grouped.md rounds 20, 21). Variant 19: the same items in two
  // launches, gate+up then down (slower than 18 and 7, round 21). Diagnostics 20 / 21: 18 with
  // the weights streamed but no math / neither (wrong results). 22: 18 with its routed bodies
  // run dry before the grid dependency, their code fetched early. 23 (24: with 22's dry passes):
  // a down warpgroup per CTA holding 6 of its item's 8 weight stages before h is ready; 25: 23
  // with h's Q8 in the down items, for I ≤ 2048 (sm90_moe_one_token_roles.cuh). 22–25 are all
  // slower than 18 and 7 cold (H100: routed only 50.2 / 52.5 / 66.5 / 54.0 µs against 44.2 and
  // 41.9; docs/moe-grouped.md round 22): measured references, not defaults.
  if (variant >= 18 && variant <= 25) {
    if (p.T == 1 && p.k <= moe4::kTok && (p.k > 0 || p.has_shared) && (variant != 25 || p.I <= moe4::kRolesMaxI)) {
      p.chunk_tokens = moe4::kTok;
      constexpr moe4::GemmShape kS = moe4::kShape8x4;
      const auto one_token = [&](auto kernel) {
        launch_pdl(kernel, dim3(grid), dim3(kS.warps * 32), kS.smem(), stream, p);
      };
      using moe4::moe_one_token_kernel, moe4::kOneTokenAll, moe4::kDiagNone;
      if (variant == 18) one_token(moe_one_token_kernel<kS.warps, kS.stages>);
      if (variant == 19) {
        one_token(moe_one_token_kernel<kS.warps, kS.stages, moe4::kOneTokenUp>);
        one_token(moe_one_token_kernel<kS.warps, kS.stages, moe4::kOneTokenDown>);
      }
      if (variant == 20) one_token(moe_one_token_kernel<kS.warps, kS.stages, kOneTokenAll, moe4::kDiagLoadOnly>);
      if (variant == 21) one_token(moe_one_token_kernel<kS.warps, kS.stages, kOneTokenAll, moe4::kDiagSkeleton>);
      if (variant == 22) one_token(moe_one_token_kernel<kS.warps, kS.stages, kOneTokenAll, kDiagNone, true>);
      if (variant >= 23) {
        const auto kernel = variant == 23   ? moe4::moe_one_token_roles_kernel<false>
                            : variant == 24 ? moe4::moe_one_token_roles_kernel<true>
                                            : moe4::moe_one_token_roles_kernel<false, true>;
        launch_pdl(kernel, dim3(grid), dim3(moe4::kRolesWarps * 32), moe4::roles_smem(variant == 25), stream, p);
      }
      return;
    }
    variant = 7;
  }
  // The chunk size the variant's gemm kernels were built for (variants 13–15, 8-token kernels,
  // once got the wide kernels' 128 here: their shared expert ran one chunk in 16 at T = 64).
  p.chunk_tokens = variant == 12                 ? moe4::kWideHalfN
                   : variant >= 9 && variant <= 11 ? moe4::kWideN
                   : variant == 8                  ? moe4::kTokWide
                                                   : moe4::kTok;
  // Diagnostics 16 / 17 leave the group launch out once the workspace holds the lists of a call
  // with the same T and shared expert (its x codes and chunks are then the previous call's: wrong
  // results, the same work at T = 1 with distinct experts).
  const bool reuse_lists = (variant == 16 || variant == 17) && ws.grouped_tokens_ == p.T &&
                           ws.grouped_shared_ == p.has_shared;
  if (!reuse_lists) {
    launch_pdl(moe4::moe_group_kernel, dim3(p.T + 1), dim3(1024), 0, stream, p);
    ws.grouped_tokens_ = p.T;
    ws.grouped_shared_ = p.has_shared;
  }
  switch (variant) {
    case 9: launch_wide<moe4::kDiagNone>(p, grid, stream); break;
    case 10: launch_wide<moe4::kDiagLoadOnly>(p, grid, stream); break;
    case 11: launch_wide<moe4::kDiagMathOnly>(p, grid, stream); break;
    case 12: launch_wide<moe4::kDiagNone, moe4::kWideHalfN>(p, grid, stream); break;
    case 1: launch_gemms<moe4::kShape12x3, moe4::kDiagNone>(p, grid, stream); break;
    case 2: launch_gemms<moe4::kShape8x4, moe4::kDiagLoadOnly>(p, grid, stream); break;
    case 3: launch_gemms<moe4::kShape12x3, moe4::kDiagLoadOnly>(p, grid, stream); break;
    case 4: launch_gemms<moe4::kShape16x2, moe4::kDiagNone>(p, grid, stream); break;
    case 5: launch_gemms<moe4::kShape16x2, moe4::kDiagLoadOnly>(p, grid, stream); break;
    case 6: launch_gemms<moe4::kShape8x4, moe4::kDiagMathOnly>(p, grid, stream); break;
    case 8: launch_gemms<moe4::kShape8x4Wide, moe4::kDiagNone>(p, grid, stream); break;
    case 13: launch_gemms<moe4::kShape8x4, moe4::kDiagSkeleton>(p, grid, stream); break;
    case 14: launch_gemms<moe4::kShape16x2, moe4::kDiagMathOnly>(p, grid, stream); break;
    case 15: launch_gemms<moe4::kShape16x2, moe4::kDiagSkeleton>(p, grid, stream); break;
    default: launch_gemms<moe4::kShape8x4, moe4::kDiagNone>(p, grid, stream);  // 7, 16, 17
  }
  if (variant != 17) launch_pdl(moe4::moe_combine_kernel, dim3(p.T, (p.D + 1023) / 1024), dim3(256), 0, stream, p);
}

}  // namespace dsv4::gpu
