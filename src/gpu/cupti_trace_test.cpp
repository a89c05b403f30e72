// CUPTI kernel tracing (cupti_trace.h) end to end on a GPU: an eager step maps kernel functions
// to launchers, replays of a captured CUDA graph are attributed to them. Skips without a GPU
// or without libcupti.
#include "gpu/cupti_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "gpu/cuda_check.h"
#include "gpu/kernel_attribution.h"
#include "gpu/ops.h"
#include "gpu/profiler.h"

namespace dsv4::gpu {
namespace {

TEST(CuptiTrace, LoadsOrSaysWhy) {
  std::string why;
  if (cupti::load(&why)) {
    EXPECT_FALSE(cupti::describe().empty());
  } else {
    EXPECT_FALSE(why.empty());
  }
}

const prof::KernelStat* row(const prof::Attribution& a, const std::string& name) {
  const auto it = std::find_if(
      a.rows.begin(), a.rows.end(), [&](const prof::KernelStat& r) { return r.kernel == name; });
  return it == a.rows.end() ? nullptr : &*it;
}

TEST(CuptiTrace, AttributesGraphReplaysToLaunchers) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  std::string why;
  if (!cupti::load(&why)) GTEST_SKIP() << why;
  constexpr int64_t kRows = 2, kIn = 256, kPairs = 32, kPositions = 8;
  DeviceBuffer<float> x(kRows * kIn), norm_w(kIn), xn(kRows * kIn), table(kPositions * kPairs * 2);
  x.fill_bytes(0);
  norm_w.fill_bytes(0);
  table.fill_bytes(0);
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Three launches, two of them (RoPE forward / inverse) of the same kernel function under
  // two launcher names.
  auto step = [&] {
    rms_norm_rows(x.get(), norm_w.get(), kRows, kIn, 1e-6f, xn.get(), s);
    rope_rows(xn.get(), kRows, kIn, 1, 0, 1, table.get(), kPairs, false, s);
    rope_rows(xn.get(), kRows, kIn, 1, 0, 1, table.get(), kPairs, true, s);
  };

  cupti::KernelTrace trace;
  trace.start();
  prof::reset();
  prof::set_enabled(true);
  trace.set_correlation(true);
  step();
  trace.set_correlation(false);
  prof::set_enabled(false);
  prof::reset();
  const auto eager = trace.take();
  ASSERT_EQ(trace.launches().size(), 3u);
  ASSERT_EQ(eager.size(), 3u);
  for (const auto& r : eager) EXPECT_NE(r.launch, 0u) << r.name;
  const prof::KernelMap map = prof::build_kernel_map(eager, trace.launches());
  EXPECT_EQ(map.occurrences.size(), 2u);

  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  step();
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm-up
  (void)trace.take();
  constexpr int kSteps = 3;
  for (int i = 0; i < kSteps; ++i) CUDA_CHECK(cudaGraphLaunch(exec, s));
  const prof::Attribution a = prof::attribute(trace.stop(), map, kSteps);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);

  EXPECT_EQ(a.records, 3 * kSteps);
  EXPECT_EQ(a.graph_records, 3 * kSteps);
  EXPECT_EQ(a.mismatched_functions, 0);
  EXPECT_EQ(a.unmapped_functions, 0);
  for (const char* name : {"rms_norm", "rope", "rope (inverse)"}) {
    const prof::KernelStat* r = row(a, name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ(r->calls, kSteps) << name;
    EXPECT_GT(r->us, 0.0) << name;
    EXPECT_GT(r->bytes, 0.0) << name;
  }
}

}  // namespace
}  // namespace dsv4::gpu
