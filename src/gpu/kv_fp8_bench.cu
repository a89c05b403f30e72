// Benchmark of the 584-byte FP8 KV codec (kv_fp8.h): kv_encode_rows (fp32 rows → cache entries,
// the write path of the ring update and the compressor finish) and kv_decode_rows (entries →
// fp32) for 1 … 64K entries. Bytes = the launchers' own accounting (2048 B fp32 row + 584 B
// entry per row); % of the HBM read bandwidth probed in the same run. CUDA-graph timing of 20
// calls per replay, median / min over 15 replays. Usage: gpu_kv_fp8_bench
#include <cuda_runtime.h>

#include <cstdio>

#include "gpu/bench_timing.cuh"
#include "gpu/cuda_check.h"
#include "gpu/kv_fp8.h"
#include "gpu/ops.h"

using namespace dsv4::gpu;

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gpu_kv_fp8_bench: no CUDA device; skipped\n");
    return 0;
  }
  constexpr int kCalls = 20, kReplays = 15;
  constexpr int64_t kMax = 65536;
  DeviceBuffer<float> rows(static_cast<size_t>(kMax * kKvDim));
  DeviceBuffer<uint8_t> cache(static_cast<size_t>(kv_cache_bytes(kMax)));
  fill_random_f32(rows.get(), kMax * kKvDim, 1.0f, 0.0f, 7, nullptr);
  const size_t probe_bytes = size_t(1) << 31;
  DeviceBuffer<uint8_t> probe(probe_bytes);
  CUDA_CHECK(cudaMemset(probe.get(), 1, probe_bytes));
  const double hbm = bench::hbm_read_probe(probe.get(), probe_bytes, nullptr);
  std::printf("HBM read probe: %.0f GB/s\n", hbm / 1e9);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  kv_encode_rows(rows.get(), kMax, cache.get(), 0, s);  // valid entries for the decode timings
  CUDA_CHECK(cudaStreamSynchronize(s));
  std::printf("%-7s %8s | %10s %10s | %12s %9s %7s\n", "op", "entries", "us", "min us", "bytes", "GB/s", "% HBM");
  for (int64_t n : {int64_t{1}, int64_t{64}, int64_t{1024}, int64_t{8192}, kMax}) {
    const double bytes = double(n) * (kKvDim * 4 + kKvEntryBytes);
    for (int op = 0; op < 2; ++op) {
      const auto st = bench::stats(bench::capture_and_time(s, kCalls, kReplays, [&](int) {
        if (op == 0) kv_encode_rows(rows.get(), n, cache.get(), 0, s);
        else kv_decode_rows(cache.get(), 0, n, rows.get(), s);
      }));
      const double gbs = bytes / (st.med * 1e-6) / 1e9;
      std::printf("%-7s %8lld | %10.2f %10.2f | %12.0f %9.1f %6.1f%%\n", op == 0 ? "encode" : "decode",
                  static_cast<long long>(n), st.med, st.lo, bytes, gbs, 100.0 * gbs * 1e9 / hbm);
    }
  }
  CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}
