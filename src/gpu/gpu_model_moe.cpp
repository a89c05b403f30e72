// GpuModel's MoE sublayer (spec §4.8; the CPU reference's cpu/moe.cpp order): the router, then
// the grouped tensor-core FP4 MoE (sm90_moe_fp4.cu) where its shape limits allow, else the
// per-(token, expert) path (lin4 / lin8, SwiGLU, combine). With TP each rank holds a slice of
// every expert's intermediate width; out is then this rank's partial sum.
#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_model_workspace.h"
#include "gpu/moe_grouped.h"
#include "gpu/ops.h"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

constexpr int64_t kMoeDecodeTokens = 256;    // grouped-MoE call size up to which decode's workspace serves
// Prefill call size: the wide kernels (chunks of 128 tokens) take 4096-token calls (~96 tokens per
// expert); workspace ≈ 0.8 GB at Flash TP1 shapes, 0.65 GB per rank at TP2.
constexpr int64_t kMoePrefillTokens = 4096;

// Tokens per grouped-MoE call (and the workspace that serves it) for an n-token sublayer.
int64_t moe_call_tokens(int64_t n) { return n > kMoeDecodeTokens ? kMoePrefillTokens : kMoeDecodeTokens; }

}  // namespace

void GpuModel::moe(const MoeW& w, bool hash, const int32_t* ids, const float* x, int64_t n, float* out) {
  Workspace& s = *active_ws_;
  const model::ModelConfig& c = config_;
  const int64_t D = c.hidden_size, E = c.n_routed_experts, inter = local_inter();
  const int k = c.num_experts_per_tok;
  const float limit = static_cast<float>(c.swiglu_limit);
  int32_t* eids = grow(s.eids, n * k);
  float* ewts = grow(s.ewts, n * k);
  const int64_t parts_size = moe_router_workspace(n, D, E);
  double* parts = grow(s.router_parts, parts_size);
  moe_router(x, n, D, w.gate.w.get(), w.gate.bf16, hash ? nullptr : w.bias.get(), hash ? w.tid2eid.get() : nullptr,
             ids, static_cast<int>(E), k, static_cast<float>(c.routed_scaling_factor), parts, parts_size, eids, ewts,
             nullptr, stream_);
  if (grouped_moe_usable(w)) {  // chunks of at most the workspace's tokens
    // Prefill takes larger calls: an expert's weights are streamed and converted once per chunk
    // of its tokens in a call (8, 32 or 128 tokens by call size: moe_grouped_forward), so the
    // fewer, larger calls the better.
    const int64_t per_call = moe_call_tokens(n);
    for (int64_t t0 = 0; t0 < n; t0 += per_call) {
      moe_grouped(w, std::min<int64_t>(per_call, n - t0), x + t0 * D, eids + t0 * k, ewts + t0 * k, out + t0 * D);
    }
    return;
  }
  uint8_t* qa = grow(s.qa, n * std::max(D, inter));
  float* sa = grow(s.sa, n * std::max(D, inter) / 128);
  uint8_t* qb = grow(s.qb, n * k * inter);
  float* sb = grow(s.sb, n * k * inter / 128);
  float* g = grow(s.g, n * k * inter);
  float* u = grow(s.u, n * k * inter);
  float* h = grow(s.h, n * k * inter);
  float* routed = grow(s.routed, n * k * D);
  quantize_q8_rows(x, n, D, qa, sa, stream_);
  const ExpertsW& ex = w.experts;
  auto lin = ex.fp4 ? lin4 : lin8;
  lin(qa, sa, n * k, k, ex.w1.get(), ex.s1.get(), inter, D, eids, g, stream_, true);
  lin(qa, sa, n * k, k, ex.w3.get(), ex.s3.get(), inter, D, eids, u, stream_, true);
  swiglu(g, u, ewts, n * k, inter, limit, h, stream_);
  quantize_q8_rows(h, n * k, inter, qb, sb, stream_);
  const bool whole = tp_size_ == 1;  // else partial sums, rounded after the all-reduce
  lin(qb, sb, n * k, 1, ex.w2.get(), ex.s2.get(), D, inter, eids, routed, stream_, whole);
  float* sg = grow(s.sg, n * inter);
  float* su = grow(s.su, n * inter);
  float* sh = grow(s.sh, n * inter);
  float* so = grow(s.shared_out, n * D);
  lin8(qa, sa, n, 1, w.sw1.w.get(), w.sw1.s.get(), inter, D, nullptr, sg, stream_);
  lin8(qa, sa, n, 1, w.sw3.w.get(), w.sw3.s.get(), inter, D, nullptr, su, stream_);
  swiglu(sg, su, nullptr, n, inter, limit, sh, stream_);
  quantize_q8_rows(sh, n, inter, qb, sb, stream_);
  lin8(qb, sb, n, 1, w.sw2.w.get(), w.sw2.s.get(), D, inter, nullptr, so, stream_, whole);
  moe_combine(routed, so, n, k, D, out, stream_, whole);
}

bool GpuModel::grouped_moe_usable(const MoeW& w) const {
  // Decided once at load (gpu_weights.cpp grouped_moe_layout: FP4 experts, supported shapes, not
  // DSV4_GPU_MOE=reference), where the experts were repacked into the grouped kernels' layout;
  // the reference path reads the checkpoint layout, so the two must never disagree.
  return w.grouped_layout;
}

void GpuModel::moe_grouped(const MoeW& w, int64_t n, const float* x, const int32_t* eids,
                           const float* ewts, float* out) {
  const model::ModelConfig& c = config_;
  const int64_t D = c.hidden_size, I = local_inter(), E = c.n_routed_experts;
  std::unique_ptr<MoeGroupedWorkspace>& ws = n > kMoeDecodeTokens ? moe_ws_large_ : moe_ws_;
  if (!ws) {
    const int max_tokens = static_cast<int>(moe_call_tokens(n));
    ws = std::make_unique<MoeGroupedWorkspace>(
        MoeGroupedShape{.max_tokens = max_tokens, .hidden = static_cast<int>(D), .inter = static_cast<int>(I),
                        .experts = static_cast<int>(E), .top_k = static_cast<int>(c.num_experts_per_tok)});
  }
  // Per-expert pointers into the contiguous expert tensors, built once per layer.
  auto it = std::find_if(moe_ptrs_.begin(), moe_ptrs_.end(), [&](const auto& p) { return p.first == &w; });
  if (it == moe_ptrs_.end()) {
    const ExpertsW& ex = w.experts;
    std::vector<MoeExpertPtrs> host(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      host[e] = MoeExpertPtrs{.w1 = ex.w1.get() + e * I * (D / 2), .s1 = ex.s1.get() + e * I * (D / 32),
                              .w3 = ex.w3.get() + e * I * (D / 2), .s3 = ex.s3.get() + e * I * (D / 32),
                              .w2 = ex.w2.get() + e * D * (I / 2), .s2 = ex.s2.get() + e * D * (I / 32)};
    }
    DeviceBuffer<MoeExpertPtrs> dev;
    dev.upload(host);
    moe_ptrs_.emplace_back(&w, std::move(dev));
    it = std::prev(moe_ptrs_.end());
  }
  MoeGroupedArgs args;
  args.tokens = static_cast<int>(n);
  args.x = x;
  args.ids = eids;
  args.weights = ewts;
  args.experts = it->second.get();
  args.shared = MoeExpertPtrs{.w1 = w.sw1.w.get(), .s1 = w.sw1.s.get(), .w3 = w.sw3.w.get(),
                              .s3 = w.sw3.s.get(), .w2 = w.sw2.w.get(), .s2 = w.sw2.s.get()};
  args.swiglu_limit = static_cast<float>(c.swiglu_limit);
  args.out = out;
  // Bytes: every touched expert's weights once — the expected distinct count under uniform
  // routing, as the profile's roofline counts them (the routing is on the device) — the shared
  // expert, activations in and out.
  const double expert_bytes = static_cast<double>(3 * I * D / 2 + 3 * I * D / 32);
  const double touched =
      prof::expected_distinct_experts(static_cast<double>(E), c.num_experts_per_tok, static_cast<double>(n));
  const double bytes = touched * expert_bytes + 3.0 * I * D + 8.0 * n * D;
  prof::Launch launch("moe_grouped_fp4", bytes, stream_);
  moe_grouped_forward(args, *ws, stream_);
}

}  // namespace dsv4::gpu
