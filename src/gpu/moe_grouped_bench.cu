// Benchmark of the grouped FP4 MoE (moe_grouped.h) at DeepSeek-V4-Flash shapes (D 4096,
// I 2048, 256 experts, top-6, FP8 shared expert), following performance.md §6: an HBM read
// probe in the same run, random (non-zero) E2M1 bytes / E8M0 scales / e4m3 codes, 16 routing
// sets and 4 shared-expert copies cycled so every iteration streams from HBM, CUDA-graph
// timing of 20 layers per replay, median / min / max over 15 replays.
// Bytes = distinct experts touched × 13,369,344 + shared 25,167,360 (when on) + x and out.
// Every table is printed once per GEMM pipeline variant (moe_grouped_set_pipeline).
// Weights are repacked into the kernels' stage-tile layout (moe_repack_experts) first.
// Usage: moe_grouped_bench [replays] [variants: e.g. 0a1; a..t = 0..19 with PDL; ":" ";" "<" "=" ">" "?" "@" "A" "B" "C" = 10 .. 19]
// DSV4_BENCH_T (e.g. "1,8,768"; any token counts up to 16384, in that order; unset: 1 … 256)
// and DSV4_BENCH_KINDS (e.g. "0,2": uniform, routed only) pick the table's rows.
// DSV4_BENCH_COLD_MB / DSV4_BENCH_COLD_CODE add a line per case timed as the model runs it (cold_line);
// DSV4_MOE_PROBE=1 the one-token launch's phase stamps (probe_line).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/env.h"
#include "gpu/bench_cold.cuh"
#include "gpu/bench_timing.cuh"
#include "gpu/cuda_check.h"
#include "gpu/moe_grouped.h"
#include "gpu/pdl.h"

using namespace dsv4::gpu;
using dsv4::env_list;

namespace {

constexpr int D = 4096, I = 2048, E = 256, K = 6, R = 16, NSH = 4, NI = 20;
constexpr size_t kExpertBytes = 3 * (size_t(I) * D / 2 + size_t(I) * D / 32);
constexpr size_t kSharedBytes = 3 * size_t(I) * D + 3 * 16 * 32;

__global__ void fill_kernel(uint8_t* p, size_t n, uint32_t seed, int mode) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 40503u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    uint8_t b = uint8_t(h >> 8);
    if (mode == 1) b = uint8_t(118 + (h >> 8) % 4);          // E8M0 scale
    if (mode == 2 && (b & 0x7f) == 0x7f) b ^= 1;             // e4m3 code, no NaN
    p[i] = b;
  }
}

// Whether v is in the list of `name` (an unset or empty list picks every value).
bool picked(const char* name, int v) {
  const std::vector<long> l = env_list(name);
  return l.empty() || std::find(l.begin(), l.end(), long{v}) != l.end();
}

// The token counts of the table: DSV4_BENCH_T's values (any T in 1 .. kMaxBenchT, in the order
// given), else the decode sizes up to 256.
constexpr int kMaxBenchT = 16384;
std::vector<int> bench_ts() {
  const std::vector<long> l = env_list("DSV4_BENCH_T");
  if (l.empty()) return {1, 8, 16, 32, 64, 128, 256};
  std::vector<int> ts;
  for (const long x : l) {
    if (x < 1 || x > kMaxBenchT) {
      std::fprintf(stderr, "DSV4_BENCH_T: %ld is outside 1..%d\n", x, kMaxBenchT);
      std::exit(2);
    }
    ts.push_back(int(x));
  }
  return ts;
}

void fill(uint8_t* p, size_t n, uint32_t seed, int mode) {
  fill_kernel<<<1024, 256>>>(p, n, seed, mode);
  CUDA_CHECK_LAUNCH();
}

// DSV4_MOE_PROBE=1: after each T = 1 case of the one-token launches (variants 18, 19), one more
// call with its probe on (moe_grouped_set_probe), after a read of DSV4_BENCH_COLD_MB MB (and the
// code sweep with DSV4_BENCH_COLD_CODE=1) when set: per event, µs since the first warpgroup's
// entry — min, median and max over the warpgroups that reached it.
void probe_line(cudaStream_t st, int mb, bool sweep, const std::function<void(int)>& call) {
  constexpr int kEv = kMoeProbeEvents, kUpDone = 3;  // moe_grouped.h's event order
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int n = 2 * sms * kEv;
  DeviceBuffer<unsigned long long> buf{size_t(n)};
  DeviceBuffer<uint4> rd((size_t(mb) << 20) / sizeof(uint4));
  DeviceBuffer<uint32_t> sink(1);
  DeviceBuffer<float> fsink(1);
  rd.fill_bytes(0);
  buf.fill_bytes(0);
  CUDA_CHECK(cudaDeviceSynchronize());
  bench::cold_prelude(st, rd, sink.get(), fsink.get(), sms, sweep, 0);
  moe_grouped_set_probe(buf.get());
  call(0);
  moe_grouped_set_probe(nullptr);
  CUDA_CHECK(cudaStreamSynchronize(st));
  const std::vector<unsigned long long> v = buf.download();
  unsigned long long t0 = ~0ull;
  for (int w = 0; w < 2 * sms; ++w)
    if (v[w * kEv] != 0) t0 = std::min(t0, v[w * kEv]);
  auto us = [&](unsigned long long t) { return double(t - t0) / 1e3; };
  const char* names[kEv] = {"entry", "plan", "xq", "up", "ready", "down", "exit", "combined",
                           "s0", "s4", "s8", "s12", "slast", "upepi", "epi0", "arrived"};
  std::printf("  probe (us since the first entry; min/med/max over warpgroups):");
  for (int e = 0; e < 8; ++e) {
    std::vector<double> t;
    for (int w = 0; w < 2 * sms; ++w)
      if (v[w * kEv + e] != 0) t.push_back(us(v[w * kEv + e]));
    if (t.empty()) continue;
    std::sort(t.begin(), t.end());
    std::printf(" %s %.1f/%.1f/%.1f", names[e], t.front(), t[t.size() / 2], t.back());
  }
  // Is the gate+up phase bound per SM? A gate+up item's stage stamps and its end, medians over
  // the warpgroups of CTAs whose two warpgroups both ran one (2) / only one did (1).
  std::printf("\n  probe gate+up stages, med on SMs with 2 / 1 busy groups:");
  for (int e = 8; e < 16; ++e) {
    std::vector<double> two, one;
    for (int c = 0; c < sms; ++c) {
      const unsigned long long a = v[c * kEv + kUpDone], b = v[(c + sms) * kEv + kUpDone];
      const unsigned long long ea = v[c * kEv + e], eb = v[(c + sms) * kEv + e];
      if (a != 0 && ea != 0) ((b != 0) ? two : one).push_back(us(ea));
      if (b != 0 && eb != 0) ((a != 0) ? two : one).push_back(us(eb));
    }
    std::sort(two.begin(), two.end());
    std::sort(one.begin(), one.end());
    std::printf(" %s %.1f/%.1f (n %zu/%zu)", names[e], two.empty() ? 0.0 : two[two.size() / 2],
                one.empty() ? 0.0 : one[one.size() / 2], two.size(), one.size());
  }
  std::printf("\n");
}

// DSV4_BENCH_COLD_MB=N (DSV4_BENCH_COLD_CODE=1: and the code sweep): a line per case with the
// calls timed as the model runs them (bench::cold_trace: each call after a read of N MB), a
// call's time being the span of its MoE launches (first start to last end, CUPTI).
void cold_line(cudaStream_t st, int mb, bool sweep, double bytes, double bw, const std::function<void(int)>& call) {
  std::string why;
  bench::ColdTrace ct = bench::cold_trace(st, mb, sweep, call, [](int) {}, &why);
  std::vector<dsv4::gpu::prof::KernelRecord>& recs = ct.records;
  std::sort(recs.begin(), recs.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  std::vector<double> spans;
  uint64_t lo = 0, hi = 0;
  bool open = false;
  for (const auto& r : recs) {
    const bool moe = r.name.find("moe4") != std::string::npos;
    if (moe) {
      lo = open ? std::min(lo, r.start_ns) : r.start_ns;
      hi = open ? std::max(hi, r.end_ns) : r.end_ns;
      open = true;
    } else if (open) {
      spans.push_back(double(hi - lo) / 1e3);
      open = false;
    }
  }
  if (open) spans.push_back(double(hi - lo) / 1e3);
  if (spans.size() != size_t(bench::kColdCalls * bench::kColdReplays)) {
    std::printf("  cold: %zu calls traced of %d (%s; CUPTI dropped %lld)\n", spans.size(),
                bench::kColdCalls * bench::kColdReplays, why.empty() ? "records missing" : why.c_str(),
                static_cast<long long>(ct.dropped));
    return;
  }
  std::sort(spans.begin(), spans.end());
  const double med = spans[spans.size() / 2];
  std::printf("  cold (%d MB read%s before each call, CUPTI span of the MoE launches): %.2f us median "
              "(min %.2f max %.2f) %7.1f GB/s %5.1f%%\n",
              mb, sweep ? " and the code sweep" : "", med, spans.front(), spans.back(), bytes / (med * 1e3),
              100.0 * bytes / (med * 1e-6) / bw);
}

}  // namespace

int main(int argc, char** argv) {
  const int replays = argc > 1 ? std::atoi(argv[1]) : 15;
  // 0..17: moe_grouped_set_pipeline variants (2, 3, 5, 10: load-only, 6, 11, 14: math-only, 13,
  // 15: neither; 16, 17: without the group (and combine) launch — diagnostics; 18, 19: T = 1 in
  // one or two launches; 20, 21: 18 load-only / skeleton — diagnostics; 22: 18 with its code fetched early;
  // 23, 24: 18 with gate+up and down warpgroups (24: and 22's dry passes); 25: 23 with h's Q8 in
  // the down items); a..z: the same
  // under programmatic dependent launch (PdlScope, as
  // GpuModel's small decode passes).
  const char* variants = argc > 2 ? argv[2] : "0a1";
  const int cold_mb = dsv4::env_int("DSV4_BENCH_COLD_MB", 0);
  const bool cold_sweep = dsv4::env_int("DSV4_BENCH_COLD_CODE", 0) != 0;
  const bool probe = dsv4::env_int("DSV4_MOE_PROBE", 0) != 0;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  std::printf("device %s, %d SMs, driver %d, runtime %d, build -arch=sm_90a -O3 --fmad=false\n", prop.name,
              prop.multiProcessorCount, drv, rt);
  // Weights: one allocation for all routed experts, NSH shared copies.
  const size_t w13 = size_t(I) * D / 2, s13 = size_t(I) * D / 32;
  DeviceBuffer<uint8_t> experts(kExpertBytes * E), shared(kSharedBytes * NSH + 4096);
  std::vector<MoeExpertPtrs> ptrs(E);
  for (int e = 0; e < E; ++e) {
    uint8_t* b = experts.get() + kExpertBytes * e;
    ptrs[e] = MoeExpertPtrs{b, b + w13, b + w13 + s13, b + 2 * w13 + s13, b + 2 * w13 + 2 * s13, b + 3 * w13 + 2 * s13};
    fill(b, w13, 11 * e + 1, 0);
    fill(b + w13, s13, 11 * e + 2, 1);
    fill(b + w13 + s13, w13, 11 * e + 3, 0);
    fill(b + 2 * w13 + s13, s13, 11 * e + 4, 1);
    fill(b + 2 * w13 + 2 * s13, w13, 11 * e + 5, 0);
    fill(b + 3 * w13 + 2 * s13, s13, 11 * e + 6, 1);
  }
  std::vector<MoeExpertPtrs> sh(NSH);
  const size_t sw = size_t(I) * D;
  for (int c = 0; c < NSH; ++c) {
    uint8_t* b = shared.get() + kSharedBytes * c;
    sh[c] = MoeExpertPtrs{b, b + 3 * sw, b + sw, b + 3 * sw + 1024, b + 2 * sw, b + 3 * sw + 2048};
    fill(b, 3 * sw, 77 + c, 2);
    fill(b + 3 * sw, 3 * 1024, 99 + c, 1);
  }
  // The kernels' stage-tile layout (random bytes permuted: the same streams as real weights).
  for (int e = 0; e < E; ++e) moe_repack_experts(ptrs[e], 1, MoeExpertPtrs{}, D, I, nullptr);
  for (int c = 0; c < NSH; ++c) moe_repack_experts(MoeExpertPtrs{}, 0, sh[c], D, I, nullptr);
  DeviceBuffer<MoeExpertPtrs> dptrs;
  dptrs.upload(ptrs);
  // HBM read probe over the 3.4 GB of expert weights.
  const double bw = bench::hbm_read_probe(experts.get(), experts.bytes() / 16 * 16, nullptr);
  std::printf("HBM read probe: %.1f GB read, median %.3f ms, %.1f GB/s\n", experts.bytes() / 1e9,
              experts.bytes() / bw * 1e3, bw / 1e9);
  std::printf("time to read 6 experts at that rate: %.2f us\n\n", 6 * kExpertBytes / bw * 1e6);

  // The workspace holds the largest T of the table.
  const std::vector<int> ts = bench_ts();
  const bool ts_named = !env_list("DSV4_BENCH_T").empty();
  const int Tmax = std::max(2048, *std::max_element(ts.begin(), ts.end()));
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> xh(size_t(Tmax) * D);
  for (float& v : xh) v = nd(rng);
  DeviceBuffer<float> x, out(size_t(Tmax) * D);
  x.upload(xh);
  MoeGroupedWorkspace ws(MoeGroupedShape{.max_tokens = Tmax, .hidden = D, .inter = I, .experts = E, .top_k = K});
  MoeGroupedWorkspace ws0(MoeGroupedShape{.max_tokens = Tmax, .hidden = D, .inter = I, .experts = E, .top_k = 0});
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  for (const char* v = variants; *v; ++v) {
    const bool pdl = *v >= 'a';
    moe_grouped_set_pipeline(pdl ? *v - 'a' : *v - '0', /*allow_diagnostic=*/true);
    PdlScope pdl_scope(pdl);
    rng.seed(7);  // the same routing sets for every variant
    std::printf("pipeline variant %d%s\n", pdl ? *v - 'a' : *v - '0', pdl ? " (PDL)" : "");
    std::printf("%-14s %4s %8s %9s %9s %9s %9s %8s %7s %8s\n", "case", "T", "experts", "MB", "med us", "min us",
                "max us", "GB/s", "%HBM", "TFLOP/s");
    const char* kinds[] = {"uniform", "skewed", "uniform-noSh", "shared-only"};
    for (int kind = 0; kind < 4; ++kind) {
      if (!picked("DSV4_BENCH_KINDS", kind)) continue;
      for (const int T : ts) {
        if (kind >= 2 && !ts_named && T != 1 && T != 8 && T != 64) continue;  // default table: 1, 8, 64
        // R routing sets: k distinct experts per token; skewed: 70% from 16 hot experts.
        std::vector<int32_t> ids(size_t(R) * T * K);
        std::vector<float> wts(ids.size());
        double distinct = 0;
        for (int r = 0; r < R; ++r) {
          std::set<int> used;
          const int hot0 = int(rng() % E);
          for (int t = 0; t < T; ++t) {
            std::set<int> mine;
            while (int(mine.size()) < K) {
              const int e = (kind == 1 && rng() % 10 < 7) ? (hot0 + int(rng() % 16)) % E : int(rng() % E);
              mine.insert(e);
            }
            int j = 0;
            for (int e : mine) {
              ids[(size_t(r) * T + t) * K + j] = e;
              wts[(size_t(r) * T + t) * K + j] = 0.25f;
              ++j;
              used.insert(e);
            }
          }
          distinct += used.size();
        }
        distinct /= R;
        DeviceBuffer<int32_t> dids;
        DeviceBuffer<float> dw;
        dids.upload(ids);
        dw.upload(wts);
        {  // eager warm-up (also sets the kernels' shared-memory attribute outside capture)
          MoeGroupedArgs a;
          a.tokens = T;
          a.x = x.get();
          a.ids = dids.get();
          a.weights = dw.get();
          a.experts = dptrs.get();
          if (kind != 2) a.shared = sh[0];
          a.out = out.get();
          moe_grouped_forward(a, kind == 3 ? ws0 : ws, st);
          CUDA_CHECK(cudaStreamSynchronize(st));
        }
        auto call = [&](int i) {
          MoeGroupedArgs a;
          a.tokens = T;
          a.x = x.get();
          a.ids = dids.get() + size_t(i % R) * T * K;
          a.weights = dw.get() + size_t(i % R) * T * K;
          a.experts = dptrs.get();
          if (kind != 2) a.shared = sh[i % NSH];
          a.out = out.get();
          moe_grouped_forward(a, kind == 3 ? ws0 : ws, st);
        };
        const auto us = bench::stats(bench::capture_and_time(st, NI, replays, call));
        const double ex = kind == 3 ? 0 : distinct;
        const double bytes = ex * kExpertBytes + (kind != 2 ? kSharedBytes : 0) + 2.0 * T * D * 4;
        const float med = us.med;
        // Tensor work: 3 matrices of I × D per (token, expert), the shared expert counted as one.
        const double flops = 2.0 * 3 * I * D * T * ((kind == 3 ? 0 : K) + (kind != 2 ? 1 : 0));
        std::printf("%-14s %4d %8.1f %9.2f %9.2f %9.2f %9.2f %8.1f %6.1f%% %8.1f\n", kinds[kind], T, ex, bytes / 1e6,
                    med, us.lo, us.hi, bytes / (med * 1e-6) / 1e9, 100.0 * bytes / (med * 1e-6) / bw,
                    flops / (med * 1e-6) / 1e12);
        if (cold_mb > 0) cold_line(st, cold_mb, cold_sweep, bytes, bw, call);
        if (probe && T == 1 && (pdl ? *v - 'a' : *v - '0') >= 18) probe_line(st, cold_mb, cold_sweep, call);
      }
    }
    std::printf("\n");
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
