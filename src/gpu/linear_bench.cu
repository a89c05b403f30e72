// Benchmark of the linears (decode M = 1..64 and prefill M = 512 / 4096; TFLOP/s for prefill)
// and per-layer small kernels (issue 8) at
// DeepSeek-V4-Flash TP2 shapes, following performance.md: an HBM read probe in the same run,
// random non-NaN e4m3 codes / bf16 / fp32 weights, enough weight copies cycled that every
// call streams its weights from HBM (≥ 256 MB per replay, > L2), CUDA-graph timing of 20
// calls per replay, median / min over the replays. Bytes per call = the launcher's profiler
// account (weights + scales + activations in + out). Small kernels (hc_pre, head_rms,
// rms_norm) run on L2-resident data: µs per call is what matters there.
// Usage: gpu_linear_bench [replays] [only]: `only` = comma-separated substrings of the shape
// names to run ("small" = the small-kernel section, "multi" = the fused decode projections,
// "router" = the MoE router); all
// when absent. Environment: DSV4_BENCH_MS = comma-separated row counts (instead of 1, 8, 16, 64,
// 512, 4096); DSV4_MMA_TILE = i runs every tensor-core linear on tile configuration i
// (linear_mma.h force_tile; same bits, other speed).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/env.h"
#include "gpu/bench_timing.cuh"
#include "gpu/cuda_check.h"
#include "gpu/decode_ops.h"
#include "gpu/linear_mma.h"
#include "gpu/ops.h"

using namespace dsv4::gpu;
using dsv4::env_list;

namespace {

constexpr int kCalls = 20;

struct Timing {
  float med_us, min_us;
};

// Warms body(i) for i in [0, kCalls) up eagerly, then times `replays` replays of one graph of them.
Timing time_graph(const std::function<void(int, cudaStream_t)>& body, int replays) {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < kCalls; ++i) body(i, s);  // warm-up outside the graph
  CUDA_CHECK(cudaStreamSynchronize(s));
  const auto st = bench::stats(bench::capture_and_time(s, kCalls, replays, [&](int i) { body(i, s); }));
  CUDA_CHECK(cudaStreamDestroy(s));
  return {st.med, st.lo};
}

double g_hbm = 0;  // bytes/s from the probe

// flops > 0 (prefill rows): also TFLOP/s (2·M·out·in).
void report(const char* kind, const std::string& name, int64_t M, double bytes, Timing t, double flops = 0) {
  const double gbs = bytes / (t.med_us * 1e-6) / 1e9;
  std::printf("%-10s %-28s M=%-4lld %9.2f us (min %8.2f) %11.0f B %8.1f GB/s %6.1f%% HBM", kind, name.c_str(),
              static_cast<long long>(M), t.med_us, t.min_us, bytes, gbs, 100.0 * gbs * 1e9 / g_hbm);
  if (flops > 0) std::printf(" %7.1f TFLOP/s", flops / (t.med_us * 1e-6) / 1e12);
  std::printf("\n");
}

int copies_for(double weight_bytes) {
  return std::max(2, std::min(64, int(256e6 / weight_bytes) + 1));
}

struct Lin8Shape {
  const char* name;
  int64_t out, in;
};
struct DenseShape {
  const char* name;
  int64_t out, in, opg;  // opg > 0: grouped (x row = out/opg groups of in)
  bool bf16;
};

}  // namespace

int main(int argc, char** argv) {
  const int replays = argc > 1 ? std::atoi(argv[1]) : 15;
  const std::string only = argc > 2 ? argv[2] : "";
  auto wanted = [&](const std::string& name) {
    if (only.empty()) return true;
    for (size_t b = 0; b <= only.size();) {
      const size_t e = std::min(only.find(',', b), only.size());
      if (e > b && name.find(only.substr(b, e - b)) != std::string::npos) return true;
      b = e + 1;
    }
    return false;
  };
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, build -arch=sm_90a -O3 --fmad=false\n", prop.name, prop.multiProcessorCount);
  {
    const size_t probe = size_t(2) << 30;
    DeviceBuffer<uint8_t> buf(probe);
    fill_random_e4m3(buf.get(), int64_t(probe), 1, nullptr);
    g_hbm = bench::hbm_read_probe(buf.get(), probe, nullptr);
    std::printf("HBM read probe: %.1f GB, median %.3f ms, %.1f GB/s\n\n", probe / 1e9, probe / g_hbm * 1e3, g_hbm / 1e9);
  }
  // Decode rows (weights streamed once: µs, GB/s, % HBM) and prefill rows (also TFLOP/s).
  std::vector<int64_t> Ms = {1, 8, 16, 64, 512, 4096};
  if (const std::vector<long> l = env_list("DSV4_BENCH_MS"); !l.empty()) {
    Ms.clear();
    for (const long v : l)
      if (v > 0 && v <= 4096) Ms.push_back(v);
  }
  if (const char* e = std::getenv("DSV4_MMA_TILE")) {
    mma::force_tile(std::atoi(e));
    std::printf("tensor-core linears forced to tile %d of %d\n", std::atoi(e), mma::tile_count());
  }
  const int64_t Mdecode = 64, Mmax = 4096;
  auto flops_of = [](int64_t M, int64_t out, int64_t in) { return M > Mdecode ? 2.0 * M * out * in : 0.0; };

  // ---- lin8 (FP8 block-scaled) -------------------------------------------------------------
  const Lin8Shape lin8s[] = {{"wq_a 1024x4096", 1024, 4096},       {"wkv 512x4096", 512, 4096},
                             {"wq_b 16384x1024", 16384, 1024},     {"wo_b 4096x4096", 4096, 4096},
                             {"shared w1/w3 1024x4096", 1024, 4096}, {"shared w2 4096x1024", 4096, 1024},
                             {"idx wq_b 4096x1024", 4096, 1024},   {"tp1 wq_b 32768x1024", 32768, 1024},
                             {"tp1 wo_b 4096x8192", 4096, 8192},   {"tp1 idx wq_b 8192x1024", 8192, 1024}};
  for (const auto& sh : lin8s) {
    if (!wanted(sh.name)) continue;
    const int64_t wb = sh.out * sh.in, sb = ((sh.out + 127) / 128) * ((sh.in + 127) / 128);
    const int nc = copies_for(double(wb));
    DeviceBuffer<uint8_t> w(wb * nc), ws(sb * nc), xq(Mmax * sh.in);
    DeviceBuffer<float> xs(Mmax * sh.in / 128), y(Mmax * sh.out);
    fill_random_e4m3(w.get(), wb * nc, 3, nullptr);
    fill_e8m0(ws.get(), sb * nc, 120, nullptr);
    fill_random_e4m3(xq.get(), Mmax * sh.in, 4, nullptr);
    fill_random_f32(xs.get(), Mmax * sh.in / 128, 0.0f, 0.01f, 5, nullptr);
    for (int64_t M : Ms) {
      const Timing t = time_graph(
          [&](int i, cudaStream_t s) {
            const int c = i % nc;
            lin8(xq.get(), xs.get(), M, 1, w.get() + c * wb, ws.get() + c * sb, sh.out, sh.in, nullptr, y.get(), s);
          },
          replays);
      report("lin8", sh.name, M, double(wb + sb) + M * sh.in * (1 + 4.0 / 128) + M * sh.out * 4.0, t,
             flops_of(M, sh.out, sh.in));
    }
  }
  // lin8_multi: wq_a + wkv over the same activations in one launch (the decode step's call).
  if (wanted("wq_a+wkv")) {
    const int64_t in = 4096, oa = 1024, ob = 512;
    const int64_t wa = oa * in, wk = ob * in, sa = (oa / 128) * (in / 128), sk = (ob / 128) * (in / 128);
    const int nc = copies_for(double(wa + wk));
    DeviceBuffer<uint8_t> w((wa + wk) * nc), ws((sa + sk) * nc), xq(Mmax * in);
    DeviceBuffer<float> xs(Mmax * in / 128), ya(Mmax * oa), yb(Mmax * ob);
    fill_random_e4m3(w.get(), (wa + wk) * nc, 3, nullptr);
    fill_e8m0(ws.get(), (sa + sk) * nc, 120, nullptr);
    fill_random_e4m3(xq.get(), Mmax * in, 4, nullptr);
    fill_random_f32(xs.get(), Mmax * in / 128, 0.0f, 0.01f, 5, nullptr);
    for (int64_t M : Ms) {
      const Timing t = time_graph(
          [&](int i, cudaStream_t s) {
            const uint8_t* wc = w.get() + (i % nc) * (wa + wk);
            const uint8_t* sc = ws.get() + (i % nc) * (sa + sk);
            const Lin8Out outs[2] = {{.w = wc, .ws = sc, .out = oa, .y = ya.get()},
                                     {.w = wc + wa, .ws = sc + sa, .out = ob, .y = yb.get()}};
            lin8_multi(xq.get(), xs.get(), M, in, std::span<const Lin8Out>(outs, 2), s);
          },
          replays);
      report("lin8", "multi wq_a+wkv 1536x4096", M, double(wa + wk + sa + sk) + M * in * (1 + 4.0 / 128) + M * (oa + ob) * 4.0,
             t, flops_of(M, oa + ob, in));
    }
  }
  std::printf("\n");

  // ---- dense bf16 / fp32 ---------------------------------------------------------------------
  const DenseShape dens[] = {{"wo_a grouped 4x1024x4096", 4096, 4096, 1024, true},
                             {"compressor 1024x4096", 1024, 4096, 0, true},
                             {"compressor 512x4096", 512, 4096, 0, true},
                             {"idx compressor 256x4096", 256, 4096, 0, true},
                             {"gate 256x4096", 256, 4096, 0, true},
                             {"weights_proj 64x4096", 64, 4096, 0, true},
                             {"head 64640x4096", 64640, 4096, 0, true},
                             {"tp1 head 129280x4096", 129280, 4096, 0, true},
                             {"hc fn fp32 24x16384", 24, 16384, 0, false},
                             {"hc_head fn fp32 4x16384", 4, 16384, 0, false}};
  for (const auto& sh : dens) {
    if (!wanted(sh.name)) continue;
    const int64_t es = sh.bf16 ? 2 : 4, wb = sh.out * sh.in * es;
    const int64_t xstride = sh.opg > 0 ? (sh.out / sh.opg) * sh.in : sh.in;
    const int nc = copies_for(double(wb));
    // Prefill rows only where the model runs them (not the LM head, not the fp32 hc projections).
    const int64_t mmax = sh.bf16 && sh.out < 65536 / 2 ? Mmax : Mdecode;
    DeviceBuffer<uint8_t> w(wb * nc);
    DeviceBuffer<float> x(mmax * xstride), y(mmax * sh.out);
    if (sh.bf16) fill_random_bf16(reinterpret_cast<uint16_t*>(w.get()), wb * nc / 2, 0.05f, 0.0f, 6, nullptr);
    else fill_random_f32(reinterpret_cast<float*>(w.get()), wb * nc / 4, 0.05f, 0.0f, 6, nullptr);
    fill_random_f32(x.get(), mmax * xstride, 1.0f, 0.0f, 7, nullptr);
    round_bf16_values(x.get(), mmax * xstride, nullptr);  // the model's dense inputs are bf16 values
    for (int64_t M : Ms) {
      if (M > mmax) continue;
      const Timing t = time_graph(
          [&](int i, cudaStream_t s) {
            const int c = i % nc;
            dense_linear(x.get(), M, xstride, w.get() + c * wb, sh.bf16, sh.out, sh.in, sh.opg, sh.bf16, 0.0f, y.get(), s);
          },
          replays);
      report(sh.bf16 ? "dense bf16" : "dense fp32", sh.name, M, double(wb) + M * xstride * 4.0 + M * sh.out * 4.0, t,
             flops_of(M, sh.out, sh.in));
    }
  }
  // wo_a as the model stores it: e4m3 codes + 128×128 scales, bf16 arithmetic (dense_linear_fp8);
  // the TP2 shape (4 groups) and the TP1 one (8 groups: 64 heads).
  for (const int64_t out : {int64_t{4096}, int64_t{8192}}) {
    const std::string tag = out == 4096 ? "" : "tp1 ";
    if (!wanted(tag + "wo_a fp8")) continue;
    const int64_t in = 4096, opg = 1024, xstride = (out / opg) * in;
    const int64_t wb = out * in, sb = (out / 128) * (in / 128);
    const int nc = copies_for(double(wb + sb));
    DeviceBuffer<uint8_t> w(wb * nc), ws(sb * nc);
    DeviceBuffer<uint16_t> wide(out * in);  // above kDenseFp8MaxRows: widened, then the bf16 GEMM
    DeviceBuffer<float> x(Mmax * xstride), y(Mmax * out);
    fill_random_e4m3(w.get(), wb * nc, 6, nullptr);
    fill_e8m0(ws.get(), sb * nc, 127 - 7, nullptr);
    fill_random_f32(x.get(), Mmax * xstride, 1.0f, 0.0f, 7, nullptr);
    round_bf16_values(x.get(), Mmax * xstride, nullptr);
    // x's bf16 copy with per-row flags, as the decode step hands it over (decode_rope_inverse_bf16;
    // here with a rotation by angle 0: cos 1, sin 0, which keeps the bf16 values).
    const int hd = 512, heads = int(xstride / hd), pairs = 32;
    std::vector<float> unit(pairs * 2, 0.0f);
    for (int p = 0; p < pairs; ++p) unit[2 * p] = 1.0f;
    DeviceBuffer<float> table(unit.size());
    CUDA_CHECK(cudaMemcpy(table.get(), unit.data(), unit.size() * sizeof(float), cudaMemcpyHostToDevice));
    DeviceBuffer<int32_t> pos0(Mdecode), exact(Mdecode * (xstride / kBf16CopyFlagValues));
    CUDA_CHECK(cudaMemset(pos0.get(), 0, Mdecode * sizeof(int32_t)));
    DeviceBuffer<uint16_t> x16(Mdecode * xstride);
    decode_rope_inverse_bf16(x.get(), Mdecode, heads, hd, pos0.get(), table.get(), pairs, x16.get(), exact.get(), nullptr);
    for (const bool with16 : {false, true})
      for (int64_t M : Ms) {
        if (with16 && M > Mdecode) continue;
        const Timing t = time_graph(
            [&](int i, cudaStream_t s) {
              const int c = i % nc;
              dense_linear_fp8(x.get(), M, xstride, w.get() + c * wb, ws.get() + c * sb, out, in, opg, true, y.get(), s,
                               wide.get(), with16 ? x16.get() : nullptr, with16 ? exact.get() : nullptr);
            },
            replays);
        report("dense fp8", tag + (with16 ? "wo_a fp8+xbf16 " : "wo_a fp8 grouped ") + std::to_string(out / opg) + "x1024x4096", M,
               double(wb + sb) + M * xstride * (with16 ? 2.0 : 4.0) + M * out * 4.0, t, flops_of(M, out, in));
      }
    // The two helpers on their own: the prefill path's widening (reads codes + scales, writes
    // bf16) and the decode step's inverse RoPE + bf16 copy (reads the row, writes its bf16 copy,
    // the rotated part back and the flags; rotation by angle 0 keeps x).
    const Timing tw = time_graph(
        [&](int i, cudaStream_t s) { widen_fp8_tiles(w.get() + (i % nc) * wb, ws.get() + (i % nc) * sb, out, in, wide.get(), s); },
        replays);
    report("widen", tag + "wo_a e4m3 -> bf16 " + std::to_string(out) + "x4096", out, double(wb + sb) + 2.0 * wb, tw);
    for (int64_t M : Ms) {
      if (M > Mdecode) continue;
      const Timing t = time_graph(
          [&](int, cudaStream_t s) {
            decode_rope_inverse_bf16(x.get(), M, heads, hd, pos0.get(), table.get(), pairs, x16.get(), exact.get(), s);
          },
          replays);
      report("small", tag + "rope_inverse+bf16 " + std::to_string(heads) + "x512", M,
             M * (xstride * 6.0 + heads * 2 * pairs * 4.0 + xstride / kBf16CopyFlagValues * 4.0), t);
    }
  }
  std::printf("\n");

  // ---- the decode step's fused compressor + indexer projections (dense_linear_multi) ---------
  if (wanted("multi")) {
    const int64_t in = 4096, outs[5] = {1024, 1024, 256, 256, 64};
    int64_t rows_total = 0;
    for (int64_t o : outs) rows_total += o;
    const int64_t wb = rows_total * in * 2;
    const int nc = copies_for(double(wb));
    DeviceBuffer<uint16_t> w(rows_total * in * nc);
    DeviceBuffer<float> x(Mdecode * in), y(Mdecode * rows_total);
    fill_random_bf16(w.get(), rows_total * in * nc, 0.05f, 0.0f, 6, nullptr);
    fill_random_f32(x.get(), Mdecode * in, 1.0f, 0.0f, 7, nullptr);
    for (int64_t M : Ms) {
      if (M > Mdecode) continue;
      const Timing t = time_graph(
          [&](int i, cudaStream_t s) {
            DenseOut o[5];
            int64_t row0 = 0;
            for (int j = 0; j < 5; ++j) {
              o[j] = {.w = w.get() + (i % nc) * rows_total * in + row0 * in, .out = outs[j], .y = y.get() + M * row0};
              row0 += outs[j];
            }
            dense_linear_multi(x.get(), M, in, std::span<const DenseOut>(o, 5), s);
          },
          replays);
      report("dense multi", "cmp+idx 1024+1024+256+256+64", M, double(wb) + M * in * 4.0 + M * rows_total * 4.0, t);
    }
    std::printf("\n");
  }

  // ---- mHC projections on the split-K small-output kernel (what GpuModel runs for them) -------
  for (const auto& [name, out] : {std::pair<const char*, int64_t>{"hc_mix 24x16384", 24}, {"hc_head_mix 4x16384", 4}}) {
    if (!wanted(name)) continue;
    const int64_t in = 16384, wb = out * in * 4;
    const int nc = copies_for(double(wb));
    DeviceBuffer<float> w(out * in * nc), x(Mmax * in), y(Mmax * out);
    DeviceBuffer<double> ws(static_cast<size_t>(small_out_linear_workspace(Mmax, out, in)));
    fill_random_f32(w.get(), out * in * nc, 0.05f, 0.0f, 6, nullptr);
    fill_random_f32(x.get(), Mmax * in, 1.0f, 0.0f, 7, nullptr);
    for (int64_t M : Ms) {
      const Timing t = time_graph(
          [&](int i, cudaStream_t s) {
            small_out_linear(x.get(), M, in, w.get() + (i % nc) * out * in, false, out, in, ws.get(),
                             small_out_linear_workspace(M, out, in), y.get(), s);
          },
          replays);
      report("small_out fp32", name, M, double(wb) + M * in * 4.0 + M * out * 4.0, t, flops_of(M, out, in));
    }
  }
  std::printf("\n");

  // ---- the MoE router (moe_router.cu: bf16 gate 256 x 4096 logits in double, then top-6) -------
  if (wanted("router")) {
    const int64_t E = 256, in = 4096, wb = E * in * 2;
    const int k = 6, nc = copies_for(double(wb));
    DeviceBuffer<uint16_t> w(E * in * nc);
    DeviceBuffer<float> x(Mmax * in), bias(E), wts(Mmax * k);
    DeviceBuffer<int32_t> ids(Mmax * k);
    DeviceBuffer<double> parts(static_cast<size_t>(moe_router_workspace(Mmax, in, E)));
    fill_random_bf16(w.get(), E * in * nc, 0.02f, 0.0f, 8, nullptr);
    fill_random_f32(x.get(), Mmax * in, 1.0f, 0.0f, 9, nullptr);
    fill_random_f32(bias.get(), E, 0.05f, 0.0f, 10, nullptr);
    for (int64_t M : Ms) {
      const int64_t need = moe_router_workspace(M, in, E);
      const Timing t = time_graph(
          [&](int i, cudaStream_t s) {
            moe_router(x.get(), M, in, w.get() + (i % nc) * E * in, true, bias.get(), nullptr, nullptr, int(E), k, 1.5f,
                       parts.get(), need, ids.get(), wts.get(), nullptr, s);
          },
          replays);
      // Gate streamed once, x read, chunk partials written and read back, ids and weights out.
      report("router", "gate 256x4096 top-6", M, double(wb) + M * in * 4.0 + 2.0 * need * 8 + M * k * 8.0, t,
             flops_of(M, E, in));
    }
    std::printf("\n");
  }

  // ---- small per-layer kernels (L2-resident inputs) ------------------------------------------
  if (!wanted("small")) return 0;
  const int64_t D = 4096, hc = 4, Mix = hc * (2 + hc);
  DeviceBuffer<float> streams(Mdecode * hc * D), mixes(Mdecode * Mix), scale(3), base(Mix), xo(Mdecode * D), post(Mdecode * hc),
      comb(Mdecode * hc * hc), q(Mdecode * 32 * 512), nw(D), yo(Mdecode * D);
  fill_random_f32(streams.get(), Mdecode * hc * D, 1.0f, 0.0f, 8, nullptr);
  fill_random_f32(mixes.get(), Mdecode * Mix, 10.0f, 0.0f, 9, nullptr);
  fill_random_f32(scale.get(), 3, 0.1f, 1.0f, 10, nullptr);
  fill_random_f32(base.get(), Mix, 0.1f, 0.0f, 11, nullptr);
  fill_random_f32(q.get(), Mdecode * 32 * 512, 1.0f, 0.0f, 12, nullptr);
  fill_random_f32(nw.get(), D, 0.1f, 1.0f, 13, nullptr);
  DeviceBuffer<float> rope(200 * 32 * 2);  // a RoPE table of 200 positions × 32 pairs
  fill_random_f32(rope.get(), 200 * 32 * 2, 1.0f, 0.0f, 15, nullptr);
  DeviceBuffer<uint8_t> qcodes(Mdecode * D);
  DeviceBuffer<float> qscales(Mdecode * D / 128);
  // hc_pre_norm on one prefill row block (the two-pass form): the block's streams are re-read
  // from L1 / L2 for the weighted sum, so bytes count them once.
  {
    const int64_t M = kSmallOutRowBlock;
    DeviceBuffer<float> st(M * hc * D), xb(M * D), pb(M * hc), cb(M * hc * hc), fw(Mix * hc * D);
    fill_random_f32(st.get(), M * hc * D, 1.0f, 0.0f, 16, nullptr);
    fill_random_f32(fw.get(), Mix * hc * D, 0.01f, 0.0f, 17, nullptr);
    const int64_t parts_n = small_out_linear_workspace(M, Mix, hc * D);
    DeviceBuffer<double> parts(static_cast<size_t>(parts_n));
    const int64_t chunks =
        small_out_linear_partials(st.get(), M, hc * D, fw.get(), false, Mix, hc * D, parts.get(), parts_n, nullptr);
    const Timing t = time_graph(
        [&](int, cudaStream_t s) {
          hc_pre_norm(st.get(), parts.get(), chunks, M, D, scale.get(), base.get(), HcDeviceParams{}, nw.get(),
                      xb.get(), pb.get(), cb.get(), s);
        },
        replays);
    report("small", "hc_pre_norm D=4096", M,
           M * (hc * D * 4.0 + D * 4.0 + hc * (3 + 2 * hc) * 4.0) + double(parts_n) * 8 + D * 4.0, t);
  }
  for (int64_t M : {int64_t{1}, int64_t{16}, int64_t{64}}) {
    Timing t = time_graph(
        [&](int, cudaStream_t s) {
          hc_pre_finish(streams.get(), mixes.get(), M, D, scale.get(), base.get(), HcDeviceParams{}, xo.get(),
                        post.get(), comb.get(), s);
        },
        replays);
    report("small", "hc_pre D=4096", M, M * (hc * D * 4.0 + D * 4.0 + hc * (3 + 2 * hc) * 4.0), t);
    // hc_pre_norm: the same plus the projection's partials reduced in and the RMSNorm applied.
    const int64_t parts_n = small_out_linear_workspace(M, Mix, hc * D);
    DeviceBuffer<double> parts(static_cast<size_t>(parts_n));
    DeviceBuffer<float> fnw(Mix * hc * D);
    fill_random_f32(fnw.get(), Mix * hc * D, 0.01f, 0.0f, 14, nullptr);
    const int64_t chunks = small_out_linear_partials(streams.get(), M, hc * D, fnw.get(), false, Mix, hc * D,
                                                     parts.get(), parts_n, nullptr);
    t = time_graph(
        [&](int, cudaStream_t s) {
          hc_pre_norm(streams.get(), parts.get(), chunks, M, D, scale.get(), base.get(), HcDeviceParams{}, nw.get(),
                      xo.get(), post.get(), comb.get(), s);
        },
        replays);
    const double pre_norm_bytes = M * (hc * D * 4.0 + D * 4.0 + hc * (3 + 2 * hc) * 4.0) + double(parts_n) * 8 + D * 4.0;
    report("small", "hc_pre_norm D=4096", M, pre_norm_bytes, t);
    // hc_pre_norm writing x's Q8 too (GpuModel's attention sublayer): codes + scales out.
    t = time_graph(
        [&](int, cudaStream_t s) {
          hc_pre_norm(streams.get(), parts.get(), chunks, M, D, scale.get(), base.get(), HcDeviceParams{}, nw.get(),
                      xo.get(), post.get(), comb.get(), s, qcodes.get(), qscales.get());
        },
        replays);
    report("small", "hc_pre_norm+q8 D=4096", M, pre_norm_bytes + M * D * (1.0 + 4.0 / 128), t);
    t = time_graph([&](int, cudaStream_t s) { hc_head_finish(streams.get(), mixes.get(), M, D, scale.get(), base.get(), HcDeviceParams{}, xo.get(), s); },
                   replays);
    report("small", "hc_head D=4096", M, M * (hc * D * 4.0 + D * 4.0), t);
    t = time_graph([&](int, cudaStream_t s) { head_rms_bf16_rows(q.get(), M * 32, 512, 1e-6f, s); }, replays);
    report("small", "head_rms 32 heads x 512", M, M * 32 * 512 * 8.0, t);
    for (int64_t dim : {int64_t{4096}, int64_t{1024}, int64_t{512}}) {
      t = time_graph([&](int, cudaStream_t s) { rms_norm_rows(xo.get(), nw.get(), M, dim, 1e-6f, yo.get(), s); }, replays);
      report("small", "rms_norm dim=" + std::to_string(dim), M, M * dim * 8.0 + dim * 4.0, t);
    }
    t = time_graph([&](int, cudaStream_t s) { hc_post(xo.get(), post.get(), comb.get(), M, D, int(hc), false, streams.get(), s); },
                   replays);
    report("small", "hc_post D=4096", M, M * D * 4.0 + M * hc * D * 8.0, t);
    // Q8 / Q4 simulation of 2 rows per token × 448 values (stride 512), as in the model's decode.
    t = time_graph([&](int, cudaStream_t s) { simulate_q8_rows(q.get(), 2 * M, 512, 448, 64, s); }, replays);
    report("small", "simulate_q8 2 rows x 448", M, 2 * M * 448 * 8.0, t);
    t = time_graph([&](int, cudaStream_t s) { simulate_q4_rows(q.get(), 2 * M, 512, 448, 32, s); }, replays);
    report("small", "simulate_q4 2 rows x 448", M, 2 * M * 448 * 8.0, t);
    t = time_graph([&](int, cudaStream_t s) { quantize_q8_rows(xo.get(), M, D, qcodes.get(), qscales.get(), s); }, replays);
    report("small", "quantize_q8 D=4096", M, M * D * 5.0 + M * (D / 128) * 4.0, t);
    // The fused row chains (fused_rows.cu) at the decode step's shapes, consecutive positions.
    const RowPositions at{.pos0 = 100};
    t = time_graph([&](int, cudaStream_t s) {
      rms_norm_q8_rows(xo.get(), nw.get(), M, 1024, 1e-6f, nullptr, qcodes.get(), qscales.get(), s);
    }, replays);
    report("small", "rms_norm+q8 dim=1024", M, M * 1024 * 5.0 + 1024 * 4.0 + M * 8 * 4.0, t);
    t = time_graph([&](int, cudaStream_t s) {
      head_rms_rope_rows(q.get(), M * 32, 512, 1e-6f, rope.get(), 32, RowPositions{.pos0 = 100, .rows_per_pos = 32}, s);
    }, replays);
    report("small", "head_rms+rope 32 heads x 512", M, M * 32 * 512 * 8.0 + M * 32 * 8.0, t);
    t = time_graph([&](int, cudaStream_t s) {
      norm_rope_simulate_q8_rows(xo.get(), nw.get(), M, 512, 1e-6f, rope.get(), 32, at, 64, yo.get(), s);
    }, replays);
    report("small", "norm+rope+sim_q8 dim=512", M, M * 512 * 8.0 + 512 * 4.0 + M * 32 * 8.0, t);
    t = time_graph([&](int, cudaStream_t s) {
      rope_hadamard_q4_rows(q.get(), M * 64, 128, rope.get(), 32, RowPositions{.pos0 = 100, .rows_per_pos = 64}, s);
    }, replays);
    report("small", "rope+hadamard+sim_q4 64 x 128", M, M * 64 * 128 * 8.0 + M * 32 * 8.0, t);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
