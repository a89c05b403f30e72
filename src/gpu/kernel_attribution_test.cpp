// CUPTI kernel records -> launcher rows (kernel_attribution.h), on synthetic records, and the
// profiler's expected expert count (profiler.h): no GPU.
#include "gpu/kernel_attribution.h"
#include "gpu/profiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace dsv4::gpu::prof {
namespace {

// Mangled names as nvcc emits them for kernels in an anonymous namespace / a template.
const std::string kLin8 = "_ZN4dsv43gpu12_GLOBAL__N_111lin8_kernelEPKhPKfi";
const std::string kRope = "_ZN4dsv43gpu12_GLOBAL__N_111rope_kernelEPflb";
const std::string kNorm = "_ZN4dsv43gpu12_GLOBAL__N_115rms_norm_kernelEPKfS3_ifPf";
const std::string kTmpl = "_ZN4dsv43gpu12_GLOBAL__N_111tmpl_kernelILi4EEEvPf";

struct Launch {
  std::string launcher, function;
  double bytes, us;  // the kernel's duration in the synthetic trace
};

// Per layer: lin8 and lin8 (experts) share lin8_kernel, rope and rope (inverse) share
// rope_kernel, rms_norm has its own. Durations differ per launcher so a wrong split shows.
std::vector<Launch> layer() {
  return {{"rms_norm", kNorm, 100, 1},
          {"lin8", kLin8, 1000, 10},
          {"rope", kRope, 50, 2},
          {"lin8 (experts)", kLin8, 4000, 30},
          {"rope (inverse)", kRope, 60, 3}};
}

std::vector<Launch> step_launches(int layers) {
  std::vector<Launch> out;
  for (int l = 0; l < layers; ++l)
    for (const Launch& x : layer()) out.push_back(x);
  return out;
}

// Records of `steps` executions of `launches` back to back from t0; launch ids when `log`.
std::vector<KernelRecord> trace(const std::vector<Launch>& launches,
                                int steps,
                                bool log,
                                uint32_t graph_id,
                                uint64_t t0 = 1000) {
  std::vector<KernelRecord> out;
  uint64_t t = t0;
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < launches.size(); ++i) {
      KernelRecord r;
      r.name = launches[i].function;
      r.start_ns = t;
      r.end_ns = t + static_cast<uint64_t>(launches[i].us * 1000);
      r.correlation = static_cast<uint32_t>(out.size() + 1);
      r.launch = log ? i + 1 : 0;
      r.graph_id = graph_id;
      r.graph_node = graph_id != 0 ? i + 1 : 0;
      t = r.end_ns + 500;
      out.push_back(r);
    }
  }
  return out;
}

std::vector<LaunchEntry> log_of(const std::vector<Launch>& launches) {
  std::vector<LaunchEntry> out;
  for (const Launch& l : launches) out.push_back({l.launcher, l.bytes});
  return out;
}

const KernelStat* row(const Attribution& a, const std::string& name) {
  const auto it = std::find_if(
      a.rows.begin(), a.rows.end(), [&](const KernelStat& r) { return r.kernel == name; });
  return it == a.rows.end() ? nullptr : &*it;
}

TEST(KernelAttribution, DemanglesKernelNames) {
  EXPECT_EQ(short_kernel_name(kLin8), "dsv4::gpu::lin8_kernel");
  EXPECT_EQ(short_kernel_name(kTmpl), "dsv4::gpu::tmpl_kernel<4>");
  EXPECT_EQ(short_kernel_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  EXPECT_EQ(short_kernel_name(""), "");
}

TEST(KernelAttribution, MapsSharedFunctionsByOccurrence) {
  const auto launches = step_launches(3);
  const KernelMap map = build_kernel_map(trace(launches, 1, true, 0), log_of(launches));
  ASSERT_EQ(map.occurrences.at(kLin8).size(), 6u);
  EXPECT_EQ(map.occurrences.at(kLin8)[0], "lin8");
  EXPECT_EQ(map.occurrences.at(kLin8)[1], "lin8 (experts)");
  EXPECT_EQ(map.occurrences.at(kRope)[5], "rope (inverse)");
  EXPECT_DOUBLE_EQ(map.bytes_per_step.at("lin8 (experts)"), 3 * 4000.0);
  EXPECT_EQ(map.launches_per_step.at("rms_norm"), 3);
}

TEST(KernelAttribution, GraphReplaysGetLauncherNamesTimesAndBytes) {
  const int layers = 4, steps = 5;
  const auto launches = step_launches(layers);
  const KernelMap map = build_kernel_map(trace(launches, 1, true, 0), log_of(launches));
  auto graph = trace(launches, steps, false, 42, 1'000'000);
  std::reverse(graph.begin(), graph.end());  // CUPTI buffers need not be in time order
  const Attribution a = attribute(graph, map, steps);
  EXPECT_EQ(a.records, int64_t{layers} * steps * 5);
  EXPECT_EQ(a.graph_records, a.records);
  EXPECT_EQ(a.mismatched_functions, 0);
  EXPECT_EQ(a.unmapped_functions, 0);
  ASSERT_EQ(a.rows.size(), 5u);
  for (const Launch& l : layer()) {
    const KernelStat* r = row(a, l.launcher);
    ASSERT_NE(r, nullptr) << l.launcher;
    EXPECT_EQ(r->calls, layers * steps) << l.launcher;
    EXPECT_NEAR(r->us, l.us * layers * steps, 1e-6) << l.launcher;
    EXPECT_DOUBLE_EQ(r->bytes, l.bytes * layers * steps) << l.launcher;
    EXPECT_NEAR(r->median_call_us, l.us, 1e-9) << l.launcher;  // every execution the same length
    EXPECT_NEAR(r->max_call_us, l.us, 1e-9) << l.launcher;
  }
  EXPECT_EQ(a.rows.front().kernel, "lin8 (experts)");  // sorted by time
}

TEST(KernelAttribution, UnknownKernelsKeepTheirDemangledName) {
  const auto launches = step_launches(2);
  // In the mapped step an extra kernel ran outside any prof::Launch (launch id 0).
  auto mapped = trace(launches, 1, true, 0);
  KernelRecord extra;
  extra.name = kTmpl;
  extra.start_ns = mapped.back().end_ns + 100;
  extra.end_ns = extra.start_ns + 7000;
  mapped.push_back(extra);
  const KernelMap map = build_kernel_map(mapped, log_of(launches));
  auto graph = trace(launches, 2, false, 9, 1'000'000);
  for (int s = 0; s < 2; ++s) {
    KernelRecord r = extra;
    r.start_ns = 5'000'000 + s * 100'000;
    r.end_ns = r.start_ns + 7000;
    graph.push_back(r);
    KernelRecord nccl;  // never seen in the mapped step
    nccl.name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL";
    nccl.start_ns = 6'000'000 + s * 100'000;
    nccl.end_ns = nccl.start_ns + 2000;
    graph.push_back(nccl);
  }
  const Attribution a = attribute(graph, map, 2);
  EXPECT_EQ(a.unmapped_functions, 1);
  EXPECT_EQ(a.mismatched_functions, 0);
  const KernelStat* t = row(a, "dsv4::gpu::tmpl_kernel<4>");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->calls, 2);
  EXPECT_NEAR(t->us, 14.0, 1e-9);
  EXPECT_EQ(t->bytes, 0.0);
  const KernelStat* n = row(a, "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->calls, 2);
  EXPECT_NE(row(a, "lin8"), nullptr);
}

TEST(KernelAttribution, CountsFunctionsWhoseCountPerStepDiffers) {
  const auto launches = step_launches(2);
  const KernelMap map = build_kernel_map(trace(launches, 1, true, 0), log_of(launches));
  auto graph = trace(launches, 3, false, 1);
  graph.pop_back();  // the last rope (inverse) of the last step is missing
  const Attribution a = attribute(graph, map, 3);
  EXPECT_EQ(a.mismatched_functions, 1);
  EXPECT_EQ(row(a, "rope (inverse)")->calls, 2 * 3 - 1);
  EXPECT_EQ(row(a, "lin8")->calls, 2 * 3);
}

TEST(KernelAttribution, EmptyInputs) {
  const KernelMap empty_map = build_kernel_map({}, {});
  EXPECT_TRUE(empty_map.occurrences.empty());
  EXPECT_TRUE(empty_map.bytes_per_step.empty());
  const Attribution none = attribute({}, empty_map, 4);
  EXPECT_TRUE(none.rows.empty());
  EXPECT_EQ(none.records, 0);
  EXPECT_EQ(none.unmapped_functions, 0);

  // Records but no map: every function under its demangled name, no bytes.
  const auto launches = step_launches(1);
  const Attribution raw = attribute(trace(launches, 2, false, 3), empty_map, 2);
  EXPECT_EQ(raw.unmapped_functions, 3);
  ASSERT_EQ(raw.rows.size(), 3u);
  const KernelStat* lin8 = row(raw, "dsv4::gpu::lin8_kernel");
  ASSERT_NE(lin8, nullptr);
  EXPECT_EQ(lin8->calls, 4);
  EXPECT_NEAR(lin8->us, 2 * (10.0 + 30.0), 1e-9);
  EXPECT_EQ(lin8->bytes, 0.0);

  // A launch log without records (e.g. CUPTI dropped them): bytes known, no occurrences.
  const KernelMap bytes_only = build_kernel_map({}, log_of(launches));
  EXPECT_DOUBLE_EQ(bytes_only.bytes_per_step.at("lin8"), 1000.0);
  EXPECT_TRUE(bytes_only.occurrences.empty());
}

// Two devices meet at three all-reduces: device 1 arrives 4 µs late at the first two, device 0
// 2 µs late at the third; each call ends 3 µs after the last arrival. Other kernels are ignored.
TEST(KernelAttribution, CollectiveSyncSplitsWaitFromLatency) {
  auto rec = [](uint32_t dev, const char* name, uint64_t start_us, uint64_t end_us) {
    return KernelRecord{.name = name, .start_ns = start_us * 1000, .end_ns = end_us * 1000, .device = dev};
  };
  const char* ar = "_ZN4dsv43gpu19one_shot_all_reduceEv";
  std::vector<KernelRecord> r = {
      rec(1, ar, 104, 107), rec(0, ar, 100, 107), rec(0, "_Z4lin8v", 107, 150), rec(1, "_Z4lin8v", 107, 150),
      rec(0, ar, 200, 207), rec(1, ar, 204, 207), rec(0, ar, 302, 305), rec(1, ar, 300, 305),
  };
  const auto s = collective_sync(r, "one_shot_all_reduce");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].device, 0u);
  EXPECT_EQ(s[0].calls, 3);
  EXPECT_NEAR(s[0].mean_wait_us, 8.0 / 3, 1e-9);
  EXPECT_NEAR(s[1].mean_wait_us, 2.0 / 3, 1e-9);
  EXPECT_NEAR(s[0].mean_span_us, (7 + 7 + 3) / 3.0, 1e-9);
  EXPECT_NEAR(s[0].mean_after_last_us, 3.0, 1e-9);
  EXPECT_NEAR(s[1].median_after_last_us, 3.0, 1e-9);
  EXPECT_TRUE(collective_sync(r, "no_such_kernel").empty());
  r.erase(std::remove_if(r.begin(), r.end(), [](const KernelRecord& k) { return k.device == 1; }), r.end());
  EXPECT_TRUE(collective_sync(r, "one_shot_all_reduce").empty());  // one device: nothing to pair
}

// The expected distinct-expert count (the roofline's and the MoE launch's) against a simulation:
// n tokens, each picking k of E experts uniformly without repeats, 4000 draws per case.
TEST(Profiler, ExpectedDistinctExpertsMatchesUniformRouting) {
  std::mt19937 rng(12345);
  for (const auto [E, k, n] : {std::tuple{256, 6, 1}, {256, 6, 16}, {256, 6, 64}, {256, 6, 512}, {64, 8, 5}}) {
    double sum = 0;
    constexpr int kDraws = 4000;
    for (int d = 0; d < kDraws; ++d) {
      std::vector<int> ids(E), hit(E, 0);
      std::iota(ids.begin(), ids.end(), 0);
      for (int t = 0; t < n; ++t) {
        for (int j = 0; j < k; ++j) std::swap(ids[j], ids[j + int(rng() % uint32_t(E - j))]);
        for (int j = 0; j < k; ++j) hit[ids[j]] = 1;
      }
      sum += std::count(hit.begin(), hit.end(), 1);
    }
    const double want = expected_distinct_experts(E, k, n);
    EXPECT_NEAR(sum / kDraws, want, 0.25) << "E " << E << " k " << k << " n " << n;
    EXPECT_LE(want, std::min<double>(E, double(n) * k));
  }
  EXPECT_DOUBLE_EQ(expected_distinct_experts(256, 6, 1), 6.0);
  EXPECT_NEAR(expected_distinct_experts(256, 6, 16), 80.8, 0.05);  // the B = 16 profile's count
}

}  // namespace
}  // namespace dsv4::gpu::prof
