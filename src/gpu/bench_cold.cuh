// Cold calls for the GPU benchmarks: a call timed as the model runs it, after the step's other
// work has pushed its data and code out of L2 and the SMs' instruction caches (shared by
// sparse_decode_bench and moe_grouped_bench; header-only, each benchmark is its own executable).
//   cold_trace(stream, mb, sweep, call, before): captures 8 × { a plain read of `mb` MB
//     (l2_evicting_read: the step's weights between two layers), with `sweep` also icache_sweep
//     (~260 KB of code on every SM: the step's other kernels), before(i), call(i) } in one graph,
//     replays it kColdReplays times under CUPTI and returns the kernel records and how many CUPTI
//     dropped (no records, and *why, when CUPTI cannot be loaded). Durations come from CUPTI, so
//     the reads are not counted.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gpu/bench_timing.cuh"
#include "gpu/cuda_check.h"
#include "gpu/cupti_trace.h"

namespace dsv4::gpu::bench {

constexpr int kColdCalls = 8, kColdReplays = 10;

// ~4K straight-line instructions (~65 KB of code) an instantiation; the four of cold_trace run
// ~260 KB of code on every SM: the step's other kernels, whose code takes the benchmarked
// kernels' place in the SMs' instruction caches and in L2.
template <int kSeed>
__global__ void icache_sweep(float* sink, float x) {
  float a = x;
#pragma unroll
  for (int i = 0; i < 4096; ++i) a = fmaf(a, 0.999f, float(i + kSeed));
  if (a == 1234.5f) *sink = a;  // (practically) never: keeps the chain
}

struct ColdTrace {
  std::vector<prof::KernelRecord> records;  // every kernel of the replays, the reads included
  int64_t dropped = 0;
};

// The step's other work before a cold call i: the read of `buf` (l2_evicting_read; none when
// empty), then with `sweep` the four icache_sweep bodies on every SM (`sms`).
inline void cold_prelude(cudaStream_t s, const DeviceBuffer<uint4>& buf, uint32_t* sink, float* fsink, int sms,
                         bool sweep, int i) {
  if (buf.size() > 0) l2_evicting_read(buf.get(), buf.size() * sizeof(uint4), sink, s);
  if (sweep)  // four instantiations: four distinct ~65 KB bodies
    [&]<int... k>(std::integer_sequence<int, k...>) {
      ((icache_sweep<(k + 1) << 12><<<4 * sms, 128, 0, s>>>(fsink, float(i))), ...);
    }(std::make_integer_sequence<int, 4>{});
}

inline ColdTrace cold_trace(cudaStream_t s, int mb, bool sweep, const std::function<void(int)>& call,
                            const std::function<void(int)>& before, std::string* why) {
  if (!cupti::load(why)) return {};
  DeviceBuffer<uint4> buf((size_t(mb) << 20) / sizeof(uint4));
  DeviceBuffer<uint32_t> sink(1);
  DeviceBuffer<float> fsink(1);
  buf.fill_bytes(0);
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kColdCalls; ++i) {
    cold_prelude(s, buf, sink.get(), fsink.get(), sms, sweep, i);
    before(i);
    call(i);
  }
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm-up
  CUDA_CHECK(cudaStreamSynchronize(s));
  cupti::KernelTrace trace;
  trace.start();
  for (int r = 0; r < kColdReplays; ++r) CUDA_CHECK(cudaGraphLaunch(exec, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  ColdTrace out;
  out.records = trace.stop();
  out.dropped = trace.dropped_records();
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(g));
  return out;
}

}  // namespace dsv4::gpu::bench
