// Latency of the tensor-parallel all-reduce at decode sizes on 2 GPUs: the one-shot
// peer-to-peer kernel (p2p_all_reduce.h) against NCCL's ncclAllReduce (TpGroup's default),
// fp32 [rows, 4096] for rows = 1, 8, 16, 64, 128.
// Each rank captures 50 back-to-back calls in one CUDA graph (launch overhead excluded, as in a
// decode step's graph); µs per call = median over 15 replays / 50, measured on rank 0.
// Bytes per call and rank = the partial sent over the link (count·4); "bus GB/s" is that divided
// by the time, and % of GPU 0's HBM read bandwidth probed in the same run (the link, not HBM,
// bounds this op). A second table times the one-shot kernel with its hc_post epilogue (decode up
// to 16 rows; bytes add the streams read and written, 4 · 4096 · 8 per row). A third times each
// all-reduce in context: after a 64 MiB weight-like stream read on every rank (cold L2 / TLB for
// its buffers), read alone subtracted.
// Usage: p2p_all_reduce_bench
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
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

// Streams `bytes` of `buf` (uint4 loads, grid-stride), as a decode step's weight reads do between
// two all-reduces: it evicts L2 and the TLB entries the all-reduce used.
__global__ void stream_read_kernel(const uint4* __restrict__ buf, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 v = buf[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads
}

// In-context timing: call i first reads slice i % kSlices (kReadBytes each) of a per-rank buffer.
constexpr int64_t kReadBytes = int64_t{64} << 20, kSlices = 8;

// Median µs per graph slot of kCalls slots, measured on rank 0. A slot is `call(rank, x, count,
// stream)`, preceded by a kReadBytes stream read when `read` (then `reduce` = false times the read
// alone, to subtract).
template <class Call>
double time_per_call(TpGroup& threads, int64_t count, const Call& call, bool read = false, bool reduce = true) {
  std::vector<float> per_replay;
  threads.run([&](int r) {
    DeviceBuffer<float> x(static_cast<size_t>(count));
    DeviceBuffer<uint8_t> weights(static_cast<size_t>(read ? kReadBytes * kSlices : 16));
    DeviceBuffer<unsigned> sink(1);
    CUDA_CHECK(cudaMemset(x.get(), 0, count * sizeof(float)));
    if (read) CUDA_CHECK(cudaMemset(weights.get(), 1, kReadBytes * kSlices));
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, r));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    call(r, x.get(), count, s);  // eager first: NCCL sets its connections up outside the capture
    CUDA_CHECK(cudaStreamSynchronize(s));
    auto us = bench::capture_and_time(s, kCalls, kReplays, [&](int i) {
      if (read) {
        const auto* slice = reinterpret_cast<const uint4*>(weights.get() + (i % kSlices) * kReadBytes);
        stream_read_kernel<<<sms * 4, 512, 0, s>>>(slice, kReadBytes / 16, sink.get());
        CUDA_CHECK(cudaGetLastError());
      }
      if (reduce) call(r, x.get(), count, s);
    });
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
  setenv("DSV4_TP_ALLREDUCE", "nccl", 1);
  TpGroup nccl(kRanks);  // NCCL for every size (TpGroup's default takes the one-shot kernel)
  unsetenv("DSV4_TP_ALLREDUCE");
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
  // The one-shot kernel with the hc_post epilogue (GpuModel::reduce_post up to 16 rows).
  std::printf("\none-shot + hc_post epilogue (hc = 4, dim 4096):\n%-6s %10s | %12s %10s %7s | %s\n", "rows", "bytes",
              "fused us", "GB/s", "% HBM", "one-shot alone us");
  std::vector<DeviceBuffer<float>> post(kRanks), comb(kRanks), streams(kRanks);
  nccl.run([&](int r) {
    post[r] = DeviceBuffer<float>(16 * 4);
    comb[r] = DeviceBuffer<float>(16 * 16);
    streams[r] = DeviceBuffer<float>(16 * 4 * 4096);
    CUDA_CHECK(cudaMemset(post[r].get(), 0, 16 * 4 * sizeof(float)));
    CUDA_CHECK(cudaMemset(comb[r].get(), 0, 16 * 16 * sizeof(float)));
    CUDA_CHECK(cudaMemset(streams[r].get(), 0, 16 * 4 * 4096 * sizeof(float)));
  });
  for (int rows : {1, 8, 16}) {
    const int64_t count = int64_t{rows} * 4096;
    const double bytes = static_cast<double>(count) * sizeof(float) + rows * 4.0 * 4096 * 8;
    const double t_one = time_per_call(nccl, count, [&](int r, float* x, int64_t n, cudaStream_t s) { p2p.run(r, x, n, s); });
    const double t_fused = time_per_call(nccl, count, [&](int r, float* x, int64_t n, cudaStream_t s) {
      const P2pAllReduce::HcPost hp{.post = post[r].get(), .comb = comb[r].get(), .streams = streams[r].get(), .dim = 4096};
      p2p.run(r, x, n, s, &hp);
    });
    std::printf("%-6d %10.0f | %12.2f %10.1f %6.1f%% | %.2f\n", rows, bytes, t_fused, bytes / t_fused / 1e3,
                100.0 * bytes / (t_fused * 1e-6) / hbm, t_one);
  }
  nccl.run([&](int r) {  // freed on their own devices
    post[r] = DeviceBuffer<float>();
    comb[r] = DeviceBuffer<float>();
    streams[r] = DeviceBuffer<float>();
  });

  // In context: each all-reduce after a 64 MiB weight-like read on every rank (both ranks start
  // the read together, so the difference is the all-reduce's own cost when its buffers are cold).
  std::printf("\nin context (after a %lld MiB stream read per call; read alone subtracted):\n",
              static_cast<long long>(kReadBytes >> 20));
  std::printf("%-6s | %12s %12s | %12s %12s\n", "rows", "read us", "one-shot us", "read us", "NCCL us");
  for (int rows : {1, 16}) {
    const int64_t count = int64_t{rows} * 4096;
    auto p2p_call = [&](int r, float* x, int64_t n, cudaStream_t s) { p2p.run(r, x, n, s); };
    auto nccl_call = [&](int r, float* x, int64_t n, cudaStream_t s) { nccl.all_reduce_sum(r, x, n, s); };
    const double read = time_per_call(nccl, count, p2p_call, true, false);  // the read alone: no call runs
    const double both_p = time_per_call(nccl, count, p2p_call, true, true);
    const double both_n = time_per_call(nccl, count, nccl_call, true, true);
    std::printf("%-6d | %12.2f %12.2f | %12.2f %12.2f\n", rows, read, both_p - read, read, both_n - read);
  }
  return 0;
}
