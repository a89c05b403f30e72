// Timing helpers shared by the GPU benchmarks (performance.md: warm-up, then medians of
// CUDA-event timings; the HBM read bandwidth probed in the same run).
//   hbm_read_probe(buf, bytes, stream): bytes/s of a streaming read of `bytes` (multiple of 16)
//     bytes at `buf` (device memory, ideally ≥ 1 GiB so L2 does not help), median of 10 timed
//     passes after 2 warm-up passes.
//   graph_replay_us(exec, stream, replays, calls): µs per call for each of `replays` timed
//     replays of a graph holding `calls` calls, after 2 warm-up replays.
//   capture_and_time(stream, calls, replays, call): captures call(0) … call(calls − 1) on
//     `stream` (must not be the legacy stream) into one graph and returns graph_replay_us.
//   l2_evicting_read(buf, bytes, sink, stream): one pass of plain (L2-allocating) loads over
//     `bytes` at `buf` (multiple of 16), e.g. to push a benchmark's data and code out of L2.
//   median(v) / stats(v): over a copy of v.
// Header-only (each benchmark is its own executable).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gpu/cuda_check.h"

namespace dsv4::gpu::bench {

template <class T>
T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class T>
struct Stats {
  T med, lo, hi;
};
template <class T>
Stats<T> stats(const std::vector<T>& v) {
  return {median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

namespace detail {
// XOR of every 16-byte word (kept alive through `sink`), one pass; streaming (evict-first)
// loads, or plain L2-allocating ones.
template <bool kStreaming = true>
__global__ void read_pass_kernel(const uint4* p, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = kStreaming ? __ldcs(p + i) : p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

// Milliseconds of `launch()` on `stream` for each of `timed` passes after `warmup`.
template <class F>
std::vector<float> event_ms(cudaStream_t stream, int warmup, int timed, const F& launch) {
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < warmup + timed; ++i) {
    CUDA_CHECK(cudaEventRecord(e0, stream));
    launch();
    CUDA_CHECK(cudaEventRecord(e1, stream));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (i >= warmup) ms.push_back(t);
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  return ms;
}
}  // namespace detail

inline double hbm_read_probe(const void* buf, size_t bytes, cudaStream_t stream) {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  DeviceBuffer<uint32_t> sink(1);
  const auto ms = detail::event_ms(stream, 2, 10, [&] {
    detail::read_pass_kernel<true><<<sms * 4, 1024, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16, sink.get());
    CUDA_CHECK(cudaGetLastError());
  });
  return static_cast<double>(bytes) / (median(ms) * 1e-3);
}

inline void l2_evicting_read(const void* buf, size_t bytes, uint32_t* sink, cudaStream_t stream) {
  detail::read_pass_kernel<false><<<1024, 256, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  CUDA_CHECK(cudaGetLastError());
}

inline std::vector<float> graph_replay_us(cudaGraphExec_t exec, cudaStream_t stream, int replays, int calls) {
  auto ms = detail::event_ms(stream, 2, replays, [&] { CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  for (float& t : ms) t = t * 1e3f / static_cast<float>(calls);
  return ms;
}

template <class F>
std::vector<float> capture_and_time(cudaStream_t stream, int calls, int replays, const F& call) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) call(i);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  auto us = graph_replay_us(exec, stream, replays, calls);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return us;
}

}  // namespace dsv4::gpu::bench
