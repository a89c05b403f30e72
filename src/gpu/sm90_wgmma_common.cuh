// Device helpers of the warp-specialized warpgroup-MMA linears (sm90_linear_wgmma.cu: lin8,
// sm90_dense_wgmma.cu: the bf16 dense path): shared-memory descriptors, wgmma fences, mbarriers,
// cp.async, and the chains' block order of linear_mma.h's numerics. sm_90a only.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gpu/cuda_check.h"

#include "gpu/linear_mma_common.cuh"

namespace dsv4::gpu::mma::detail::wgmma {

// Host: blocks of 256 threads for a grid-stride conversion launch over `items` items.
inline int conversion_grid(int64_t items) {
  return int(std::min<int64_t>((items + 255) / 256, int64_t{device_sm_count()} * 8));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Descriptor of a 128-byte-swizzled K-major tile at shared address saddr (1024-byte aligned
// atoms; 8-row groups 1024 B apart).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
  return uint64_t((saddr & 0x3ffffu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}

// The n-th block of the chains' order (chain c = blocks c, c + 8, … in increasing kb), or −1.
__device__ __forceinline__ int64_t chain_order_block(int64_t n, int64_t kblocks) {
  for (int c = 0; c < kWarps && n >= 0; ++c) {
    const int64_t cnt = c < kblocks ? (kblocks - c + kWarps - 1) / kWarps : 0;
    if (n < cnt) return c + int64_t{kWarps} * n;
    n -= cnt;
  }
  return -1;
}

// Bulk copies onto mbarriers (sm90_lin8_bulk.cu, sm90_dense_bulk.cu).
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// bytes (a multiple of 16, both addresses 16-byte aligned) from global src to shared dst,
// completing on bar's transaction count.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// chain_order_block in 32-bit arithmetic without a loop: chains c < r have q + 1 blocks, the
// others q (q = kblocks / 8, r = kblocks % 8); n < kblocks.
__device__ __forceinline__ int chain_block32(int n, int kblocks) {
  const int q = kblocks >> 3, r = kblocks & 7, head = r * (q + 1);
  if (n < head) {
    const int c = n / (q + 1);
    return c + kWarps * (n - c * (q + 1));
  }
  const int m = n - head, c = m / q;  // q > 0 here
  return r + c + kWarps * (m - c * q);
}

// The bulk kernels' stage ring without producer warps: full[s] completes on one expect_tx
// arrival plus the copies' bytes; released[s] counts the consumer warps done with stage s's
// block. Thread 0 initializes both (the caller syncs the CTA after).
template <int kStages>
__device__ __forceinline__ void bulk_ring_init(uint64_t* full, int* released) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + s, 1);
      released[s] = 0;
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
}
// A consumer warp is done with block n's stage s (its wgmmas waited for, its shared reads used):
// the last of the CTA's `warps` warps to get here issues block n + kStages into the stage
// (fetch(n + kStages)) when there is one.
template <int kStages, class Fetch>
__device__ __forceinline__ void bulk_stage_release(int* released, int s, int n, int kblocks, int warps, Fetch&& fetch) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0 && n + kStages < kblocks && atomicAdd(released + s, 1) == warps - 1) {
    released[s] = 0;
    fence_proxy_async();
    fetch(n + kStages);
  }
}

}  // namespace dsv4::gpu::mma::detail::wgmma
