// Tensor parallelism inside one process: one worker thread per extra GPU and one NCCL
// communicator per rank.
//
// Rank r runs on device r. run(f) calls f(0) on the calling thread (after cudaSetDevice(0))
// and f(r) on worker thread r for r ≥ 1, waits for all, then rethrows the first exception.
// Every rank must reach the same collectives in the same order: callers validate their
// inputs before the first launch, identically on every rank. If a rank still fails (CUDA
// error, out of memory), the others would wait in a collective forever; instead the group
// aborts its communicators, run() rethrows the first error, and every later run() throws
// "tensor-parallel group unusable" naming it (the model must be reloaded).
// all_reduce_sum(rank, x, count, stream): in-place fp32 sum of x [count] over the ranks
// (the one-shot peer-to-peer kernel of p2p_all_reduce.h up to kOneShotMaxFloats when every pair
// of GPUs has peer access, NCCL above and with DSV4_TP_ALLREDUCE=nccl; DSV4_TP_ALLREDUCE=p2p
// takes the one-shot kernel up to kP2pMaxFloats); the result is identical on every rank.
// all_reduce_sum_hc_post(rank, x, count, hc, stream): the same sum with the mHC post-mix fused
// into the one-shot kernel (P2pAllReduce::HcPost); returns false, launching nothing, when the
// sum would not take the one-shot kernel or the shapes do not fit (the caller then runs
// all_reduce_sum and hc_post).
// transfer_bytes(rank, from, to, data, bytes, stream): point-to-point copy of `bytes` bytes from
// rank `from`'s buffer into rank `to`'s buffer (NCCL send/recv), e.g. one GpuStatePool slot
// received into another GPU's pool (prefill/decode disaggregation). Ranks `from` and `to` must
// both call it (each with its own `data`); other ranks must not; from != to.
// Thread-safety: run() must not be called concurrently from two threads.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "gpu/p2p_all_reduce.h"

namespace dsv4::gpu {

// True when this build links NCCL (tp_size > 1 needs it).
bool tp_supported();

class TpGroup {
 public:
  // Uses devices 0 .. size-1; throws when fewer devices exist or NCCL is missing.
  explicit TpGroup(int size);
  ~TpGroup();
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;

  int size() const { return size_; }
  void run(const std::function<void(int rank)>& f);
  static constexpr int64_t kP2pMaxFloats = int64_t{1} << 19;  // [128, 4096] fp32 = 2 MiB
  // Default one-shot limit: every decode sum up to 128 rows of 4096 (2×H200, p2p_all_reduce_bench,
  // the data-as-flag kernel vs NCCL 2.28: 9.11 vs 12.95 µs at 64 rows, 15.46 vs 27.33 at 128).
  static constexpr int64_t kOneShotMaxFloats = kP2pMaxFloats;
  void all_reduce_sum(int rank, float* x, int64_t count, cudaStream_t stream);
  bool all_reduce_sum_hc_post(int rank, float* x, int64_t count, const P2pAllReduce::HcPost& hc, cudaStream_t stream);
  // True when all_reduce_sum_hc_post(x, count, hc) runs (the one-shot kernel takes the sum and
  // the shapes fit its epilogue).
  bool fuses_hc_post(const float* x, int64_t count, const P2pAllReduce::HcPost& hc) const;
  // True when all_reduce_sum(count) runs the one-shot kernel (profiler names).
  bool uses_one_shot(int64_t count) const;
  void transfer_bytes(int rank, int from, int to, void* data, int64_t bytes, cudaStream_t stream);

 private:
  struct Impl;
  int size_ = 1;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::gpu
