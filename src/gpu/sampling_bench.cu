// Benchmark of the GPU sampler (gpu/sampling.h) at the Flash vocabulary: µs per call (median of
// CUDA-graph replays of 8 calls), the logits bytes it must read once, GB/s and % of the HBM read
// bandwidth measured in the same run. The sampler makes several passes over each row (most from
// L2), so % HBM reads low by design: the number to watch is µs against the decode step.
// Usage: gpu_sampling_bench (no arguments).
#include <cstdio>
#include <random>
#include <vector>

#include "gpu/bench_timing.cuh"
#include "gpu/cuda_check.h"
#include "gpu/sampling.h"

using namespace dsv4::gpu;

int main() {
  constexpr int64_t kVocab = 129280;
  constexpr int kCalls = 8;
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DeviceBuffer<uint4> probe(size_t(1) << 28);
  CUDA_CHECK(cudaMemset(probe.get(), 1, probe.size() * sizeof(uint4)));
  const double peak = bench::hbm_read_probe(probe.get(), probe.size() * sizeof(uint4), s) / 1e9;
  std::printf("device %s, %d SMs; HBM read probe %.0f GB/s; vocab %lld\n\n",
              prop.name,
              prop.multiProcessorCount,
              peak,
              static_cast<long long>(kVocab));
  std::printf("%-28s %5s | %9s %9s | %9s %8s %6s\n",
              "mode",
              "rows",
              "med us",
              "min us",
              "MB",
              "GB/s",
              "%HBM");
  struct Mode {
    const char* name;
    void (*set)(SampleParams&);
  };
  const Mode modes[] = {
      {"greedy", [](SampleParams& p) { p.greedy = 1; }},
      {"greedy + top_logprobs 20",
       [](SampleParams& p) { p.greedy = 1, p.logprobs = 1, p.top_logprobs = 20; }},
      {"temperature 1", [](SampleParams& p) { p.greedy = 0; }},
      {"top_k 50 + top_p 0.9", [](SampleParams& p) { p.greedy = 0, p.top_k = 50, p.top_p = 0.9f; }},
      {"top_p 0.95, t 0.8",
       [](SampleParams& p) { p.greedy = 0, p.top_p = 0.95f, p.inv_temperature = 1.25; }},
  };
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  for (int rows : {1, 16, 64}) {
    std::vector<float> logits(size_t(rows) * kVocab);
    for (float& v : logits) v = nd(rng);
    DeviceBuffer<float> d_logits, scratch(logits.size());
    d_logits.upload(logits);
    DeviceBuffer<SampleResult> results(static_cast<size_t>(rows));
    for (const Mode& m : modes) {
      std::vector<SampleParams> params(static_cast<size_t>(rows));
      for (SampleParams& p : params) {
        p.on_device = 1;
        p.sample_vocab = static_cast<int32_t>(kVocab);
        p.u = ud(rng);
        m.set(p);
      }
      DeviceBuffer<SampleParams> d_params;
      d_params.upload(params);
      const auto st = bench::stats(bench::capture_and_time(s, kCalls, 20, [&](int) {
        sample_rows(d_logits.get(), rows, kVocab, d_params.get(), results.get(), scratch.get(), s);
      }));
      const double bytes = double(rows) * kVocab * 4;
      std::printf("%-28s %5d | %9.2f %9.2f | %9.2f %8.0f %5.1f%%\n",
                  m.name,
                  rows,
                  st.med,
                  st.lo,
                  bytes / 1e6,
                  bytes / (st.med * 1e3),
                  100.0 * bytes / (st.med * 1e3) / peak);
    }
  }
  CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}
