// One-shot all-reduce over peer-to-peer stores between the GPUs of one process (issue 8): the
// decode-sized tensor-parallel sums (a [rows, 4096] fp32 partial: 16 KiB at batch 1, 1 MiB at
// batch 64) without NCCL's protocol. NVLink multicast is not used (switched off on our
// machines). Round 1 (pull: each rank read the peers' buffers after a flag barrier) measured no
// faster than NCCL 2.28 on 2×H200 (6.9 vs 6.6 µs at 1 row); round 2 pushes instead, so nothing
// waits on a remote read: 6.65 / 6.91 / 7.62 / 12.45 / 18.79 µs at 1 / 8 / 16 / 64 / 128 rows
// against NCCL's 6.67 / 7.10 / 8.09 / 13.23 / 27.46 (p2p_all_reduce_bench, CUDA graphs,
// 2026-11-30) — equal at one row, so the per-call floor is not the data movement. Round 3
// (2026-11-30, eleventh session) drops the flags: the data is its own flag (Lamport-style).
//
// One kernel per rank and call, a fixed grid of kBlocks blocks; block b owns the same slice of x
// on every rank:
//   1. stores its slice of x into every peer's receive slot for this rank (generation
//      call % 3): posted NVLink stores, no fence, no flag;
//   2. polls its own receive slots (local memory) until no value of its slice is the empty
//      pattern (kEmptyBits, a signalling NaN: arithmetic never produces one; an input with those
//      bits travels and is summed as the canonical quiet NaN), empties each slot again as it
//      reads it, and sums over ranks 0, 1, …, n−1 in that order (first term not added to 0), so
//      every rank ends with identical bits; for 2 ranks this is a + b like NCCL.
// Epochs are counted on the device (one counter per block), so the kernel is CUDA-graph
// capturable and replays need no host input. Why three generations suffice: a peer writes
// generation g again at call k + 3, after it received this rank's call k + 2 data, which this
// rank pushed after its call k kernel (which emptied the generation-g slots) had finished.
// Failure: abort() (host) raises a flag in mapped host memory that the receive loop polls, so a rank
// spinning for a peer that died returns (with garbage); the caller then treats the group as
// unusable, as after an NCCL abort.
// Thread-safety: run() for rank r from rank r's thread only; every rank must call run() with the
// same count in the same order (like a collective).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace dsv4::gpu {

class P2pAllReduce {
 public:
  static constexpr int kMaxRanks = 8;
  static constexpr int kBlocks = 24;
  static constexpr int kThreads = 512;
  static constexpr int kGenerations = 3;
  static constexpr uint32_t kEmptyBits = 0x7fbadbadu;  // an empty receive slot (signalling NaN)

  // True when every pair of devices 0..size-1 can access each other's memory (and size >= 2).
  static bool supported(int size);

  // Enables peer access between devices 0..size-1 and allocates, on each, the receive slots
  // (kGenerations × size × max_floats floats, emptied) and the epoch counters; restores the
  // current device.
  P2pAllReduce(int size, int64_t max_floats);
  ~P2pAllReduce();
  P2pAllReduce(const P2pAllReduce&) = delete;
  P2pAllReduce& operator=(const P2pAllReduce&) = delete;

  int size() const { return size_; }
  int64_t max_floats() const { return max_floats_; }
  // Optional epilogue of run(): the mHC post-mix (hc = 4) of the summed sub-layer output, as
  // hc_post(sum, post, comb, count / dim, dim, 4, round_f = true, streams) would run after the
  // sum (same bits, one launch fewer). streams [count / dim, 4, dim], post [.., 4], comb [.., 4, 4].
  struct HcPost {
    const float* post = nullptr;
    const float* comb = nullptr;
    float* streams = nullptr;
    int64_t dim = 0;
  };
  // Whether run() can fuse `hc` for this x / count (float4 paths: dim % 4 == 0, count a multiple
  // of dim, every pointer 16-byte aligned).
  static bool fits(const float* x, int64_t count, const HcPost& hc);

  // In-place sum of x [count] (count <= max_floats(), x on rank's device) over the ranks,
  // enqueued on `stream` (the current device must be rank's); with `hc` (fits() must hold), also
  // its post-mix into hc->streams.
  void run(int rank, float* x, int64_t count, cudaStream_t stream, const HcPost* hc = nullptr);
  // Releases kernels polling for a peer's data (host side; any thread).
  void abort();

 private:
  int size_ = 0;
  int64_t max_floats_ = 0;
  struct Rank {
    float* buffers = nullptr;    // receive slots [kGenerations][size][max_floats] (sender r writes slot r)
    uint32_t* epochs = nullptr;  // [kBlocks]: calls made by this rank
  };
  std::vector<Rank> ranks_;
  volatile int* abort_host_ = nullptr;  // mapped pinned memory
  int* abort_device_ = nullptr;
};

}  // namespace dsv4::gpu
