// Benchmark of the sm_90a sparse decode attention and indexer top-k (performance.md §6).
// Prints µs per layer call (median over CUDA-graph replays of 8 launches each, min and max),
// minimum bytes moved, GB/s and % of the read bandwidth measured in the same run.
// Inputs: a 612 MB FP8 KV pool (2^20 entries of random e4m3 codes, E8M0 scales 2^-7..2^0,
// random bf16 rope dims) and a 268 MB indexer key pool, far beyond the 60 MB L2; each of the
// 8 launches in a graph uses another of 4 index-list / key-range copies.
// Calls of at most kPdlMaxRows rows run inside a PdlScope, as GpuModel's decode (DSV4_PDL=0:
// plain launches); `pdl=` in the output says which. Queries are bf16 (`a.q`) unless
// DSV4_BENCH_Q32=1: fp32 (`a.q_f32`, as GpuModel's decode passes them; same values), or 2: fp32
// and every call reads the first copy's (likely L2-resident, as after the model's rope kernel);
// `q32=` in the output says which. DSV4_BENCH_COLD_MB=N adds a line per case: the calls' CUPTI
// times when each follows a read of N MB (DSV4_BENCH_COLD_CODE=1: and a sweep through ~260 KB of
// other code) and (fp32 queries) their queries' rewrite (cold_calls).
// "probe" lines (cluster plans of the main rows): the per-phase profile of one call from the
// probe instantiation (sparse_decode_probe): first tile's ids, its data, dequant, QK, softmax,
// P·V, loop end, first cluster barrier, merge weights, merged output, last barrier.
// Usage: gpu_sparse_decode_bench [indexer [probe] | decode | ws]   (indexer: only the indexer rows,
// probe: with the selection's phase stamps after each +topk row;
// decode: only the automatic-plan attention rows at B = 1 and 8; ws: the many-row attention rows,
// mma.sync against the warp-specialized kernel, same plan otherwise). The indexer rows' contexts
// and batches: DSV4_BENCH_CTX, DSV4_BENCH_B (comma lists; unset: 8K, 128K, 1M × 1, 8, 16, 64);
// DSV4_BENCH_COLD_MB / _CODE time the +topk rows cold too (the selection's median, scan +
// selection a call).
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/env.h"
#include "gpu/bench_cold.cuh"
#include "gpu/bench_timing.cuh"
#include "gpu/cuda_check.h"
#include "gpu/cupti_trace.h"
#include "gpu/pdl.cuh"
#include "gpu/pdl.h"
#include "gpu/sm90_indexer_topk.h"
#include "gpu/sparse_decode.h"

using namespace dsv4::gpu;
using namespace dsv4::gpu::sm90;

namespace {

constexpr int kCopies = 4, kLaunches = 8;
constexpr int64_t kPoolEntries = 1 << 20, kKeyPool = 1 << 20;

__device__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return uint32_t(x >> 32);
}
__global__ void fill_pool(uint8_t* p, int64_t bytes, int page, int64_t stride) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < bytes;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t off = i % stride;
    const uint32_t h = hash32(i);
    uint8_t v;
    if (off < int64_t(page) * kEntryData) {
      const int64_t o = off % kEntryData;
      if (o < kNopeDim) v = uint8_t(h & 0xff) == 0x7f || (h & 0xff) == 0xff ? 0 : uint8_t(h);
      else v = (o & 1) ? uint8_t(0x3c + (h & 3)) * ((h >> 8) & 1 ? 1 : 0) | ((h >> 9) & 0x80) : uint8_t(h);
    } else {
      v = (off - int64_t(page) * kEntryData) % 8 == 7 ? 0 : uint8_t(120 + h % 8);
    }
    p[i] = v;
  }
}
// fp32 copies of bf16 values (the model's queries are fp32: DSV4_BENCH_Q32=1).
__global__ void widen_bf16(const uint16_t* p, float* f, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    f[i] = __uint_as_float(uint32_t(p[i]) << 16);
}
__global__ void fill_bf16(uint16_t* p, int64_t n, uint32_t seed) {  // FP4-like values
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t h = hash32(i * 977 + seed);
    const float mag[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
    const float v = mag[h & 7] * ((h >> 3) & 1 ? -1.f : 1.f) * (1.0f / float(1 << ((h >> 4) & 3)));
    p[i] = uint16_t(__float_as_uint(v) >> 16);
  }
}
using Stats = bench::Stats<float>;

// The launch floor of the attention's shape: PDL wait, two cluster barriers, nothing else.
__global__ void floor_kernel() {
  pdl_wait();
  pdl_trigger();
  cooperative_groups::this_cluster().sync();
  cooperative_groups::this_cluster().sync();
}

// Captures kLaunches calls fn(i) in a graph, replays it; per-call µs statistics.
Stats time_graph(cudaStream_t s, const std::function<void(int)>& fn, int reps = 20) {
  return bench::stats(bench::capture_and_time(s, kLaunches, reps, fn));
}

// 4 GiB streaming read, GB/s.
double read_bandwidth(cudaStream_t s) {
  const int64_t bytes = int64_t(4) << 30;
  DeviceBuffer<uint4> buf(bytes / 16);
  CUDA_CHECK(cudaMemset(buf.get(), 1, bytes));
  return bench::hbm_read_probe(buf.get(), bytes, s) / 1e9;
}

// Per-phase probe (sparse_decode_probe) of one call after `warm` plain calls: per phase the
// median over the CTAs and 9 calls of its clock64 time, in ns at the CTA's measured clock.
// A warp-specialized plan's probe (its slots: sm90_sparse_decode_ws.cu) prints each slot's time
// since the CTA's entry instead of each phase's length.
void print_probe(cudaStream_t s, const SparseDecodePlan& plan, const std::function<void(int)>& call,
                 const std::function<void(long long*)>& probe_call, const char* label) {
  const bool ws = plan.warp_specialized;
  const int ctas = plan.rows * plan.head_groups * plan.splits;
  constexpr int kSlots = dsv4::gpu::sm90::kSparseDecodeProbeSlots;
  DeviceBuffer<long long> pb(size_t(ctas) * kSlots);
  std::vector<std::vector<double>> ph(13), steady(6);  // ws: per-tile means of slots 16..21
  std::vector<double> ghz;
  for (int rep = 0; rep < 9; ++rep) {
    for (int w = 0; w < 3; ++w) call(rep + w);
    probe_call(pb.get());
    CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<long long> v = pb.download();
    for (int b = 0; b < ctas; ++b) {
      const long long* x = &v[size_t(b) * kSlots];
      if (x[14] <= x[13]) continue;
      const double rate = double(x[15] - x[0]) / double(x[14] - x[13]);  // clocks per ns
      ghz.push_back(rate);
      for (int i = ws ? 1 : 2; i <= 12; ++i) ph[i].push_back(double(x[i] - x[ws ? 0 : i - 1]) / rate);
      if (ws && x[22] > 1)
        for (int i = 0; i < 6; ++i) steady[i].push_back(double(x[16 + i]) / double(x[22] - 1) / rate);
    }
  }
  auto med = [](std::vector<double> v) {
    if (v.empty()) return -1.0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const char* names[13] = {"", "", "ids", "data", "deq", "qk", "smax", "pv", "end", "bar1", "ml", "out", "bar2"};
  const char* ws_names[13] = {"",        "lengths", "stored0", "q",    "full0", "qk0",  "smax0",
                              "pv0",     "tiles",   "issued0", "data0", "merge", "bar2"};
  std::printf("  probe %s (ns%s, medians; SM clock %.2f GHz):", label, ws ? " since entry" : "", med(ghz));
  for (int i = ws ? 1 : 2; i <= 12; ++i) std::printf(" %s %.0f", (ws ? ws_names : names)[i], med(ph[i]));
  std::printf("\n");
  if (ws && !steady[0].empty()) {  // tiles 1.. of CTAs with two or more
    const char* steady_names[6] = {"full wait", "qk", "smax", "pv", "| producer: empty wait", "store"};
    std::printf("  probe %s steady state (ns a tile, medians over CTAs): consumer:", label);
    for (int i = 0; i < 6; ++i) std::printf(" %s %.0f", steady_names[i], med(steady[i]));
    std::printf("\n");
  }
}

// The kernels cold_calls reports (substrings of their mangled names): one `timed` kernel a call,
// whose median it prints, and `counted` ones added to the per-call total (`total_label`). The
// case's bytes are rated against the timed median, or against the total when rate_on_total.
struct ColdKernels {
  const char* timed_label;
  const char* total_label;
  std::vector<std::string> timed, counted;
  bool rate_on_total;
};
// The attention: the split kernel (either form), and its merge kernel.
const ColdKernels kColdAttention{"split kernel", "split + merge", {"sparse_decode_kernel", "sparse_decode_ws_kernel"},
                                 {"merge_kernel"}, false};
// The indexer: the selection (either kernel), and the scan.
const ColdKernels kColdIndexer{"selection", "scan + selection", {"select_kernel", "select_cluster_kernel"},
                               {"score_kernel"}, true};

// DSV4_BENCH_COLD_MB / DSV4_BENCH_COLD_CODE (cold_calls).
int cold_mb() {
  static const int mb = dsv4::env_int("DSV4_BENCH_COLD_MB", 0);
  return mb;
}
bool cold_code() {
  static const bool on = dsv4::env_int("DSV4_BENCH_COLD_CODE", 0) != 0;
  return on;
}

bool name_has_any(const std::string& name, const std::vector<std::string>& parts) {
  return std::any_of(parts.begin(), parts.end(),
                     [&](const std::string& p) { return name.find(p) != std::string::npos; });
}

// DSV4_BENCH_COLD_MB=N: the calls timed as the model runs them — each call of a graph of 8
// follows a plain read of N MB (bench::l2_evicting_read: the step's weights between two layers,
// which push the KV lines, the queries and the kernel's code out of L2), with
// DSV4_BENCH_COLD_CODE=1 also icache_sweep, and `before(i)` (e.g. the queries' rewrite, as the
// model's rope kernel writes them just before the attention); the kernels' own durations come
// from CUPTI (the rest is not counted). Prints the timed kernel's median (with the case's bytes:
// GB/s and % of the probe `peak`) and the mean per call of the timed and counted kernels
// together, over 10 replays.
void cold_calls(cudaStream_t s, int mb, bool sweep, double bytes, double peak, const ColdKernels& kernels,
                const std::function<void(int)>& call, const std::function<void(int)>& before) {
  std::string why;
  const bench::ColdTrace ct = bench::cold_trace(s, mb, sweep, call, before, &why);
  const std::vector<prof::KernelRecord>& recs = ct.records;
  if (recs.empty()) {
    std::printf("  cold: no CUPTI records (%s)\n", why.empty() ? "none traced" : why.c_str());
    return;
  }
  constexpr int kReplays = bench::kColdReplays;
  std::vector<double> timed;
  double total = 0.0;
  for (const prof::KernelRecord& r : recs) {
    const double us = double(r.end_ns - r.start_ns) / 1e3;
    const bool is_timed = name_has_any(r.name, kernels.timed);
    if (is_timed) timed.push_back(us);
    if (is_timed || name_has_any(r.name, kernels.counted)) total += us;
  }
  if (timed.size() != size_t(bench::kColdCalls * kReplays)) {
    std::printf("  cold: %zu %s records of %d calls (CUPTI dropped %lld)\n", timed.size(), kernels.timed_label,
                bench::kColdCalls * kReplays, static_cast<long long>(ct.dropped));
    return;
  }
  std::sort(timed.begin(), timed.end());
  const double med = timed[timed.size() / 2], per_call = total / double(timed.size());
  const double rated = kernels.rate_on_total ? per_call : med;
  std::printf("  cold (%d MB read%s before each call, CUPTI): %s %.2f us median (min %.2f max %.2f) "
              "%7.0f GB/s %5.1f%%; %s %.2f us a call\n",
              mb, sweep ? " and the code sweep" : "", kernels.timed_label, med, timed.front(), timed.back(),
              bytes / (rated * 1e3), 100.0 * bytes / (rated * 1e3) / peak, kernels.total_label, per_call);
}

void attention_case(cudaStream_t s, const KvPool& pool, double peak, const char* kind, int rows,
                    int main_len, int extra_len, bool contiguous_extra, int min_chunk = 16,
                    int heads = kHeads, int max_cluster = 0, int head_groups = 0, bool probe = false,
                    int ws = -1) {
  const PdlScope pdl(rows <= kPdlMaxRows);  // as GpuModel's decode (DSV4_PDL=0: off)
  std::mt19937 rng(rows * 131 + extra_len);
  const int me = std::max(extra_len, 1);
  std::vector<int32_t> mi(size_t(kCopies) * rows * main_len), ei(size_t(kCopies) * rows * me, -1);
  for (int c = 0; c < kCopies; ++c)
    for (int r = 0; r < rows; ++r) {
      const int64_t wstart = rng() % (kPoolEntries - main_len);
      for (int j = 0; j < main_len; ++j) mi[(size_t(c) * rows + r) * main_len + j] = int32_t(wstart + j);
      const int64_t estart = rng() % (kPoolEntries - me);
      for (int j = 0; j < extra_len; ++j)
        ei[(size_t(c) * rows + r) * me + j] =
            int32_t(contiguous_extra ? estart + j : int64_t(rng() % kPoolEntries));
    }
  DeviceBuffer<int32_t> d_mi, d_ei, d_ml, d_el;
  d_mi.upload(mi);
  d_ei.upload(ei);
  d_ml.upload(std::vector<int32_t>(rows, main_len));
  d_el.upload(std::vector<int32_t>(rows, extra_len));
  DeviceBuffer<uint16_t> q(size_t(kCopies) * rows * heads * kHeadDim), out(size_t(rows) * heads * kHeadDim);
  fill_bf16<<<256, 256, 0, s>>>(q.get(), int64_t(q.size()), 5);
  // DSV4_BENCH_Q32=1: the queries as fp32 (a.q_f32, as GpuModel's decode passes them), same values;
  // 2: and every call reads the first copy's (likely L2-resident, as after the model's rope kernel).
  static const int q32_mode = dsv4::env_int("DSV4_BENCH_Q32", 0);
  const bool q32 = q32_mode != 0;
  const size_t q_per = size_t(rows) * heads * kHeadDim;  // one copy's query elements
  auto q_copy = [&](int i) { return size_t(q32_mode == 2 ? 0 : i % kCopies); };  // call i's query copy
  DeviceBuffer<float> q_f32(q32 ? q.size() : 1);
  if (q32) widen_bf16<<<256, 256, 0, s>>>(q.get(), q_f32.get(), int64_t(q.size()));
  DeviceBuffer<float> sink(kHeads);
  CUDA_CHECK(cudaMemset(sink.get(), 0, kHeads * 4));
  // ws: −1 the plan's kernel; 0 the mma.sync kernel; 1 the warp-specialized one (one head group).
  SparseDecodePlan plan =
      plan_sparse_decode(rows, main_len, extra_len, 132, min_chunk, heads, 0, max_cluster, ws >= 0 ? 1 : head_groups);
  if (ws >= 0) plan.warp_specialized = ws == 1;
  DeviceBuffer<uint8_t> work(std::max<size_t>(plan.workspace_bytes, 1));
  auto args = [&](int i) {
    const int c = i % kCopies;
    SparseDecodeArgs a;
    if (q32) a.q_f32 = q_f32.get() + q_copy(i) * q_per;
    else a.q = reinterpret_cast<const __nv_bfloat16*>(q.get()) + q_copy(i) * q_per;
    a.heads = heads;
    a.main_pool = pool;
    a.main_idx = d_mi.get() + size_t(c) * rows * main_len;
    a.main_len = d_ml.get();
    a.main_stride = main_len;
    if (extra_len > 0) {
      a.extra_pool = pool;
      a.extra_idx = d_ei.get() + size_t(c) * rows * me;
      a.extra_len = d_el.get();
      a.extra_stride = me;
    }
    a.sink = sink.get();
    a.out = reinterpret_cast<__nv_bfloat16*>(out.get());
    a.rows = rows;
    return a;
  };
  auto call = [&](int i) { sparse_decode(args(i), plan, work.get(), s); };
  call(0);
  CUDA_CHECK(cudaStreamSynchronize(s));
  const Stats st = time_graph(s, call);
  const int cands = main_len + extra_len;
  const double bytes = double(rows) * (double(cands) * (kEntryBytes + 4) + (q32 ? 6.0 : 4.0) * heads * kHeadDim);
  const double flops = double(rows) * heads * cands * kHeadDim * 4.0;
  if (probe && plan.cluster > 1)
    print_probe(s, plan, call, [&](long long* pb) { sparse_decode_probe(args(0), plan, work.get(), pb, s); }, kind);
  std::printf("%-5s H=%-2d B=%-3d cands=%-5d chunk=%-4d splits=%-3d cluster=%-2d groups=%d pdl=%d q32=%d %s | %8.2f us "
              "(min %.2f max %.2f) | %8.2f MB %7.0f GB/s %5.1f%% | %6.1f TFLOP/s\n",
              kind, heads, rows, cands, plan.chunk, plan.splits, plan.cluster, plan.head_groups, int(pdl_enabled()),
              q32_mode, plan.warp_specialized ? "ws " : "mma", st.med,
              st.lo, st.hi, bytes / 1e6,
              bytes / (st.med * 1e3), 100.0 * bytes / (st.med * 1e3) / peak,
              flops / (st.med * 1e6));
  if (cold_mb() > 0)
    cold_calls(s, cold_mb(), cold_code(), bytes, peak, kColdAttention, call, [&](int i) {
      if (!q32) return;  // fp32 queries: call i's copy rewritten
      const size_t off = q_copy(i) * q_per;
      widen_bf16<<<256, 256, 0, s>>>(q.get() + off, q_f32.get() + off, int64_t(q_per));
    });
}

// µs per call of floor_kernel: `ctas` CTAs of 512 threads and ~199 KB smem (one per SM, as the
// attention), clusters of `cluster`, PDL as at B = 1.
void floor_case(cudaStream_t s, int ctas, int cluster) {
  const PdlScope pdl(true);
  const size_t smem = 199 * 1024;
  CUDA_CHECK(cudaFuncSetAttribute(floor_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CUDA_CHECK(cudaFuncSetAttribute(floor_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  auto call = [&](int) {
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(cluster);
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(ctas));
    cfg.blockDim = dim3(512);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_enabled() ? 2 : 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, floor_kernel));
  };
  call(0);
  CUDA_CHECK(cudaStreamSynchronize(s));
  const Stats st = time_graph(s, call);
  std::printf("floor (empty kernel: PDL wait, 2 cluster barriers) %3d CTAs cluster %-2d pdl=%d | %8.2f us (min %.2f max %.2f)\n",
              ctas, cluster, int(pdl_enabled()), st.med, st.lo, st.hi);
}

// The median over rows and calls of each selection phase's stamp (indexer_topk_probe), in µs at
// the SM clock: one "select probe" line.
void print_select_probe(const std::vector<long long>& stamps, int rows, int calls) {
  int khz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  std::printf("  select probe (us since entry, median of %d rows x %d calls; clock %d MHz):", rows, calls, khz / 1000);
  static const char* names[] = {"dep", "hist", "bin1", "hist2", "thresh", "picks", "ties", "sort", "out"};
  for (int i = 0; i < 9; ++i) {
    std::vector<long long> v;
    for (int c = 0; c < calls; ++c)
      for (int r = 0; r < rows; ++r) v.push_back(stamps[(size_t(c) * rows + r) * kSelectProbeSlots + i]);
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    std::printf(" %s %.2f", names[i], double(v[v.size() / 2]) / (khz / 1000.0));
  }
  std::printf("\n");
}

void indexer_case(cudaStream_t s, const uint16_t* keys, double peak, int rows, int ctx,
                  bool scores_only, bool probe = false) {
  const PdlScope pdl(rows <= kPdlMaxRows);
  const int visible = ctx / 4;
  DeviceBuffer<uint16_t> q(size_t(rows) * kIndexHeads * kIndexDim);
  fill_bf16<<<64, 256, 0, s>>>(q.get(), int64_t(q.size()), 11);
  DeviceBuffer<float> w(size_t(rows) * kIndexHeads);
  CUDA_CHECK(cudaMemset(w.get(), 0, w.bytes()));
  std::vector<float> hw(w.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (float& v : hw) v = nd(rng) * 0.011f;
  w.upload(hw);
  // Copy c: row r reads keys [base, base + visible) with bases spread over the key pool.
  std::vector<int64_t> base(size_t(kCopies) * rows);
  for (size_t i = 0; i < base.size(); ++i) base[i] = int64_t(rng() % (kKeyPool - visible));
  DeviceBuffer<int64_t> d_base;
  d_base.upload(base);
  DeviceBuffer<int32_t> vis, topk(size_t(rows) * kIndexTopk), count(rows);
  vis.upload(std::vector<int32_t>(rows, visible));
  DeviceBuffer<uint8_t> work(indexer_workspace_bytes(rows, visible));
  DeviceBuffer<long long> stamps(size_t(rows) * kSelectProbeSlots);
  auto call = [&](int i, bool with_probe = false) {
    IndexerArgs a;
    a.q = reinterpret_cast<const __nv_bfloat16*>(q.get());
    a.weights = w.get();
    a.keys = reinterpret_cast<const __nv_bfloat16*>(keys);
    a.key_base = d_base.get() + size_t(i % kCopies) * rows;
    a.visible = vis.get();
    a.rows = rows;
    a.max_visible = visible;
    a.topk = topk.get();
    a.count = count.get();
    a.scores_only = scores_only;
    if (with_probe) indexer_topk_probe(a, work.get(), stamps.get(), s);
    else indexer_topk(a, work.get(), s);
  };
  call(0);
  CUDA_CHECK(cudaStreamSynchronize(s));
  const Stats st = time_graph(s, call);
  const double bytes = double(rows) * visible * (kIndexDim * 2 + (scores_only ? 2 : 6));
  std::printf("index%s B=%-2d ctx=%-8d keys=%-7d pdl=%d | %8.2f us (min %.2f max %.2f) | %8.2f MB "
              "%7.0f GB/s %5.1f%%\n",
              scores_only ? "(scan)  " : "(+topk) ", rows, ctx, visible, int(pdl_enabled()), st.med, st.lo, st.hi,
              bytes / 1e6, bytes / (st.med * 1e3), 100.0 * bytes / (st.med * 1e3) / peak);
  if (cold_mb() > 0 && !scores_only)
    cold_calls(s, cold_mb(), cold_code(), bytes, peak, kColdIndexer, [&](int i) { call(i); }, [](int) {});
  if (!probe || scores_only) return;
  constexpr int kCalls = 9;
  std::vector<long long> all;
  for (int c = 0; c < kCalls; ++c) {
    call(c, true);
    CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<long long> one = stamps.download();
    all.insert(all.end(), one.begin(), one.end());
  }
  print_select_probe(all, rows, kCalls);
}

// The indexer rows: 8K / 128K / 1M context (DSV4_BENCH_CTX: a comma list of contexts, multiples
// of 4 up to 1M), B = 1, 8, 16, 64 (DSV4_BENCH_B: a list of batches up to 64); the scan, then
// scan + top-k. probe: each +topk row is followed by its selection's phase stamps.
void indexer_rows(cudaStream_t s, const uint16_t* keys, double peak, bool probe = false) {
  std::vector<long> ctxs = dsv4::env_list("DSV4_BENCH_CTX"), bs = dsv4::env_list("DSV4_BENCH_B");
  if (ctxs.empty()) ctxs = {8192, 131072, 1 << 20};
  if (bs.empty()) bs = {1, 8, 16, 64};
  std::printf("\nindexer (bytes = 256 B per key + score keys)\n");
  for (const long ctx : ctxs)
    for (const long b : bs) {
      if (ctx < 4 || ctx > (1 << 20) || ctx % 4 != 0 || b < 1 || b > 64) {
        std::fprintf(stderr, "indexer rows: context %ld / batch %ld outside 4..1M (multiple of 4) / 1..64\n", ctx,
                     b);
        std::exit(2);
      }
      for (bool so : {true, false}) indexer_case(s, keys, peak, int(b), int(ctx), so, probe);
    }
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  std::printf("device %s, %d SMs, driver %d, runtime %d\n", prop.name, prop.multiProcessorCount, drv, rt);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const double peak = read_bandwidth(s);
  std::printf("read-bandwidth probe (4 GiB): %.0f GB/s\n\n", peak);

  KvPool pool;
  pool.page_size = 64;
  pool.page_stride = kv_page_stride(64);
  DeviceBuffer<uint8_t> pool_bytes(size_t(kv_pool_bytes(kPoolEntries, 64)));
  pool.base = pool_bytes.get();
  fill_pool<<<1024, 256, 0, s>>>(pool.base, int64_t(pool_bytes.size()), 64, pool.page_stride);
  DeviceBuffer<uint16_t> keys(size_t(kKeyPool) * kIndexDim);
  fill_bf16<<<1024, 256, 0, s>>>(keys.get(), int64_t(keys.size()), 1);
  CUDA_CHECK(cudaStreamSynchronize(s));
  if (argc > 1 && std::string(argv[1]) == "ws") {  // the warp-specialized kernel against mma.sync
    std::printf("attention, mma.sync (ws=0) vs warp-specialized (ws=1) kernel\n");
    for (int b : {16, 32, 64})
      for (int h : {64, 32})
        for (int ws : {0, 1}) attention_case(s, pool, peak, "CSA", b, 128, 512, false, 16, h, 0, 0, false, ws);
    for (int b : {16, 64})
      for (int ctx : {8192, 65536, 1 << 20})
        for (int ws : {0, 1}) attention_case(s, pool, peak, "HCA", b, 128, ctx / 128, true, 16, kHeads, 0, 0, false, ws);
    for (int b : {16, 64})
      for (int ws : {0, 1}) attention_case(s, pool, peak, "SWA", b, 128, 0, false, 16, kHeads, 0, 0, false, ws);
    CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
  }
  if (argc > 4 && std::string(argv[1]) == "ws-case") {  // one warp-specialized case, e.g. for a profiler:
    // ws-case HCA|CSA|SWA B context [probe | h32] (HCA: 128 + context / 128 candidates; CSA: 128 + 512;
    // SWA: 128; probe: the per-phase stamps too; h32: 32 heads, a TP2 rank's)
    const std::string kind = argv[2], opt = argc > 5 ? argv[5] : "";
    const int b = std::atoi(argv[3]), ctx = std::atoi(argv[4]);
    const int extra = kind == "HCA" ? ctx / 128 : kind == "CSA" ? 512 : 0;
    attention_case(s, pool, peak, kind.c_str(), b, 128, extra, kind == "HCA", 16, opt == "h32" ? 32 : kHeads, 0, 0,
                   opt == "probe", 1);
    CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "indexer") {  // indexer [probe]
    indexer_rows(s, keys.get(), peak, argc > 2 && std::string(argv[2]) == "probe");
    CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "decode") {  // the automatic-plan decode rows (B = 1, 8)
    for (int h : {64, 32}) attention_case(s, pool, peak, "CSA", 1, 128, 512, false, 16, h, 0, 0, true);
    attention_case(s, pool, peak, "SWA", 1, 128, 0, false, 16, kHeads, 0, 0, true);
    attention_case(s, pool, peak, "SWA", 1, 128, 0, false, 16, 32);
    attention_case(s, pool, peak, "HCA", 1, 128, 8192 / 128, true, 16, kHeads, 0, 0, true);
    attention_case(s, pool, peak, "HCA", 1, 128, 65536 / 128, true);
    for (int h : {64, 32}) attention_case(s, pool, peak, "CSA", 8, 128, 512, false, 16, h);
    attention_case(s, pool, peak, "SWA", 8, 128, 0, false);
    attention_case(s, pool, peak, "HCA", 8, 128, 8192 / 128, true);
    CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
  }

  std::printf("attention (per layer call; bytes = KV entries 584 B + 4 B id, q and out bf16); clusters "
              "resident at once: size 2 %d, 4 %d, 8 %d, 16 %d\n", sparse_decode_cluster_capacity(2),
              sparse_decode_cluster_capacity(4), sparse_decode_cluster_capacity(8), sparse_decode_cluster_capacity(16));
  for (int h : {64, 32})
    for (int cl : {1, 8, 16})
      for (int g : {1, 2, 4}) attention_case(s, pool, peak, "CSA", 1, 128, 512, false, 16, h, cl, g);
  for (int b : {8, 16})
    for (int cl : {1, 4, 8, 16}) attention_case(s, pool, peak, "CSA", b, 128, 512, false, 16, kHeads, cl);
  for (int mc : {16, 32, 64}) attention_case(s, pool, peak, "CSA", 1, 128, 512, false, mc);
  for (int b : {1, 8, 16, 64}) attention_case(s, pool, peak, "CSA", b, 128, 512, false, 16, kHeads, 0, 0, true);
  for (int b : {1, 8, 16, 64}) attention_case(s, pool, peak, "CSA", b, 128, 512, false, 16, 32, 0, 0, b == 1);
  for (int b : {8, 64}) attention_case(s, pool, peak, "CSA", b, 128, 512, false, 16, kHeads, 1);
  for (int ctx : {8192, 65536, 1 << 20})
    for (int b : {1, 8, 16, 64}) attention_case(s, pool, peak, "HCA", b, 128, ctx / 128, true, 16, kHeads, 0, 0, b == 1 && ctx == 8192);
  for (int b : {1, 8, 16, 64}) attention_case(s, pool, peak, "SWA", b, 128, 0, false, 16, kHeads, 0, 0, b == 1);
  for (int b : {1, 8}) attention_case(s, pool, peak, "SWA", b, 128, 0, false, 16, 32);
  indexer_rows(s, keys.get(), peak);
  std::printf("\n");
  for (const auto& [ctas, cl] : {std::pair{64, 16}, std::pair{32, 16}, std::pair{32, 8}, std::pair{64, 1}})
    floor_case(s, ctas, cl);
  CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}
