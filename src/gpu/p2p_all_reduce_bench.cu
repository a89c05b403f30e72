// Latency of the tensor-parallel all-reduce at decode sizes on 2 GPUs: the one-shot
// peer-to-peer kernel (p2p_all_reduce.h) against NCCL's ncclAllReduce (TpGroup's default),
// fp32 [rows, 4096] for rows = 1, 8, 16, 64, 128.
// Each rank captures 50 back-to-back calls in one CUDA graph (launch overhead excluded, as in a
// decode step's graph); µs per call = median over 15 replays / 50, measured on rank 0.
// Bytes per call and rank = the peer's partial read over the link (count·4); "bus GB/s" is that
// divided by the time, and % of GPU 0's HBM read bandwidth probed in the same run (the link, not
// HBM, bounds this op). Usage: p2p_all_reduce_bench
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpu/bench_timing.cuh"
#include "gpu/cuda_check.h"
#include "gpu/p2p_all_reduce.h"
#include "gpu/tp_group.h"

using namespace dsv4::gpu;

namespace {

constexpr int kRanks = 2, kCalls = 50, kReplays = 15;

// Median µs per call of `call(rank, x, count, stream)` captured kCalls times per graph.
template <class Call>
double time_per_call(TpGroup& threads, int64_t count, const Call& call) {
  std::vector<float> per_replay;
  threads.run([&](int r) {
    DeviceBuffer<float> x(static_cast<size_t>(count));
    CUDA_CHECK(cudaMemset(x.get(), 0, count * sizeof(float)));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    call(r, x.get(), count, s);  // eager first: NCCL sets its connections up outside the capture
    CUDA_CHECK(cudaStreamSynchronize(s));
    auto us = bench::capture_and_time(s, kCalls, kReplays, [&](int) { call(r, x.get(), count, s); });
    if (r == 0) per_replay = std::move(us);
    CUDA_CHECK(cudaStreamDestroy(s));
  });
  return bench::median(per_replay);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < kRanks || !tp_supported() ||
      !P2pAllReduce::supported(kRanks)) {
    std::printf("p2p_all_reduce_bench: needs %d GPUs with peer access and NCCL; skipped\n", kRanks);
    return 0;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  unsetenv("DSV4_TP_ALLREDUCE");
  TpGroup nccl(kRanks);  // NCCL for every size (the default)
  P2pAllReduce p2p(kRanks, int64_t{128} * 4096);
  std::printf("device %s x%d; all-reduce of fp32 [rows, 4096], %d calls per CUDA graph, median of %d replays\n",
              prop.name, kRanks, kCalls, kReplays);
  double hbm = 0;  // rank 0's HBM read bandwidth, for the % column (the peer read crosses NVLink)
  {
    const size_t probe_bytes = size_t(1) << 31;
    DeviceBuffer<uint8_t> probe(probe_bytes);
    CUDA_CHECK(cudaMemset(probe.get(), 1, probe_bytes));
    hbm = bench::hbm_read_probe(probe.get(), probe_bytes, nullptr);
  }
  std::printf("HBM read probe (GPU 0): %.0f GB/s\n", hbm / 1e9);
  std::printf("%-6s %10s | %12s %10s %7s | %12s %10s %7s | %s\n", "rows", "bytes", "one-shot us", "bus GB/s", "% HBM",
              "NCCL us", "bus GB/s", "% HBM", "NCCL/one-shot");
  for (int rows : {1, 8, 16, 64, 128}) {
    const int64_t count = int64_t{rows} * 4096;
    const double bytes = static_cast<double>(count) * sizeof(float);
    const double t_p2p = time_per_call(nccl, count, [&](int r, float* x, int64_t n, cudaStream_t s) { p2p.run(r, x, n, s); });
    const double t_nccl =
        time_per_call(nccl, count, [&](int r, float* x, int64_t n, cudaStream_t s) { nccl.all_reduce_sum(r, x, n, s); });
    std::printf("%-6d %10.0f | %12.2f %10.1f %6.1f%% | %12.2f %10.1f %6.1f%% | %.2fx\n", rows, bytes, t_p2p,
                bytes / t_p2p / 1e3, 100.0 * bytes / (t_p2p * 1e-6) / hbm, t_nccl, bytes / t_nccl / 1e3,
                100.0 * bytes / (t_nccl * 1e-6) / hbm, t_nccl / t_p2p);
  }
  return 0;
}
