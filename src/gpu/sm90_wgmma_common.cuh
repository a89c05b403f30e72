// Device helpers of the warpgroup-MMA linears (sm90_linear_wgmma.cu: lin8 with a producer
// warpgroup; sm90_lin8_bulk.cu, sm90_dense_bulk.cu: lin8 and bf16 dense on bulk-copied tiles):
// shared-memory descriptors and layout, wgmma fences and operand lists, mbarriers, cp.async and
// bulk copies, the chains' block order of linear_mma.h's numerics, the tile store. sm_90a only.
#pragma once

#include <algorithm>
#include <cstdint>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_mma_common.cuh"
#include "gpu/pdl.cuh"

namespace dsv4::gpu::mma::detail::wgmma {

// Host: blocks of 256 threads for a grid-stride conversion launch over `items` items.
inline int conversion_grid(int64_t items) {
  return int(std::min<int64_t>((items + 255) / 256, int64_t{device_sm_count()} * 8));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The first 1024-byte-aligned byte of the dynamic shared memory (128-byte swizzle atoms need it).
__device__ __forceinline__ uint8_t* smem_1024(uint8_t* raw) {
  return raw + ((1024 - (smem_addr(raw) & 1023)) & 1023);
}

// Descriptor of a 128-byte-swizzled K-major tile at shared address saddr (1024-byte aligned
// atoms; 8-row groups 1024 B apart).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
  return uint64_t((saddr & 0x3ffffu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Byte offset, in a 128-byte-swizzled tile of R rows × 256 bytes (two atoms: bytes 0..127 and
// 128..255 of every row), of row p's 16-byte chunk C (0..15): atom C / 8, chunk (C % 8) ^ (p & 7).
__device__ __forceinline__ int sw128_chunk_offset(int R, int p, int C) {
  return ((C >> 3) * R + p) * 128 + (((C & 7) ^ (p & 7)) << 4);
}

// The accumulator operands of an m64n128 wgmma (64 fp32 registers of d): the register list of
// the instruction text and the constraint list, e.g. DSV4_WGMMA_D64("+f").
#define DSV4_WGMMA_D64_REGS                                                                                        \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29," \
  "%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"  \
  "%57,%58,%59,%60,%61,%62,%63}"
#define DSV4_WGMMA_D64(C)                                                                                          \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]),     \
      C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]), C(d[22]), \
      C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31]), C(d[32]), C(d[33]), \
      C(d[34]), C(d[35]), C(d[36]), C(d[37]), C(d[38]), C(d[39]), C(d[40]), C(d[41]), C(d[42]), C(d[43]), C(d[44]), \
      C(d[45]), C(d[46]), C(d[47]), C(d[48]), C(d[49]), C(d[50]), C(d[51]), C(d[52]), C(d[53]), C(d[54]), C(d[55]), \
      C(d[56]), C(d[57]), C(d[58]), C(d[59]), C(d[60]), C(d[61]), C(d[62]), C(d[63])

// d (+)= A(64 × 16 at adesc) · B(16 × 128 at bdesc)ᵀ, both operands in shared memory, f16 or bf16
// (kBf16), fp32 accumulate; fresh when !kAcc (the compiler then sees d written, not read).
// d[4j + 2r + c]: A row 16·(warp % 4) + g + 8r, B row 8j + 2t + c.
#define DSV4_WGMMA_SS_N128(TYPE, SCALE_D, C)                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D ", 0;\n"                                 \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " DSV4_WGMMA_D64_REGS \
               ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                   \
               : DSV4_WGMMA_D64(C)                                                                 \
               : "l"(adesc), "l"(bdesc))
template <bool kBf16, bool kAcc>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t adesc, uint64_t bdesc) {
  if constexpr (kBf16 && kAcc) DSV4_WGMMA_SS_N128("bf16", "1", "+f");
  else if constexpr (kBf16) DSV4_WGMMA_SS_N128("bf16", "0", "=f");
  else if constexpr (kAcc) DSV4_WGMMA_SS_N128("f16", "1", "+f");
  else DSV4_WGMMA_SS_N128("f16", "0", "=f");
}
#undef DSV4_WGMMA_SS_N128

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
// After mbar_init, before any bulk copy completes on the barrier: the initialization visible to
// the async proxy.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
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

// Blocks of chain c (c, c + 8, … below kblocks).
__host__ __device__ __forceinline__ int64_t chain_blocks(int c, int64_t kblocks) {
  return c < kblocks ? (kblocks - c + kWarps - 1) / kWarps : 0;
}

// The n-th block of the chains' order (chain c = blocks c, c + 8, … in increasing kb), or −1.
__device__ __forceinline__ int64_t chain_order_block(int64_t n, int64_t kblocks) {
  for (int c = 0; c < kWarps && n >= 0; ++c) {
    const int64_t cnt = chain_blocks(c, kblocks);
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
// The same with an L2 cache policy (`.L2::cache_hint`, e.g. kL2EvictFirst for a weight stream).
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
      "%4;\n" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}
// L2 policies of `.L2::cache_hint`: the values `createpolicy.fractional.L2::evict_first.b64 p, 1.0`
// and `… evict_normal …` give on sm_90 (constants: ptxas 13.0 can drop a createpolicy whose users
// are copies; L2PolicyTest checks the values on the device). The linears' weight copies are
// evict-first: a decode step reads each weight byte once, several times the L2 a layer, and should
// not push out what the step reuses (code, activations, caches; docs/decode-step.md). Not on
// cp.async: a cache-hinted cp.async traps with ptxas 13.0 (illegal instruction).
constexpr uint64_t kL2EvictFirst = 0x12F0000000000000ull;
constexpr uint64_t kL2EvictNormal = 0x16F0000000000000ull;

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
    mbar_init_fence();
  }
}
// After bulk_ring_init (and whatever the caller staged in shared memory before the wait): the
// CTA syncs, waits for its programmatic predecessor, lets its successor launch, and thread 0
// fetches the first kStages blocks (fetch(n), n < kblocks).
template <int kStages, class Fetch>
__device__ __forceinline__ void bulk_ring_start(int kblocks, Fetch&& fetch) {
  __syncthreads();
  pdl_wait();
  pdl_trigger();
  if (threadIdx.x == 0)
    for (int n = 0; n < kStages && n < kblocks; ++n) fetch(n);
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

// The dense path's x split for chunk C (0..15) of a 128-K block in the wgmma tile order: pairs
// i = 0..3 of the chunk from physical k 32i + 16η + 2·(C % 8), η = C / 8, of the block's fp32
// values at src, as bf16 hi and lo = x − hi (packed pairs). Returns whether some lo is nonzero.
__device__ __forceinline__ bool dense_x_chunk(const float* src, int C, uint32_t (&h)[4], uint32_t (&l)[4]) {
  const int eta = C >> 3, cc = C & 7;
  bool any = false;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(src + 32 * q + 16 * eta + 2 * cc));
    h[q] = pack_bf16(v.x, v.y);
    const float2 hv = bf16x2_to_float2(h[q]);
    l[q] = pack_bf16(v.x - hv.x, v.y - hv.y);
    any |= l[q] != 0u;
  }
  return any;
}

// The dense chains' bookkeeping (linear_mma.h numerics) after block kb of chain c: when it was
// the chain's last block, total = c == 0 ? double(acc) : total + double(acc), acc restarts at 0
// and kb = c + 1 (the next chain's first block); otherwise kb advances by kWarps.
template <int M>
__device__ __forceinline__ void next_chain_block(float (&acc)[M], double (&total)[M], int& c, int& kb, int kblocks) {
  if (kb + kWarps < kblocks) {
    kb += kWarps;
    return;
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    total[i] = c == 0 ? double(acc[i]) : total[i] + double(acc[i]);
    acc[i] = 0.0f;
  }
  kb = ++c;
}
// After the last block: chains without blocks (c .. kWarps − 1) add zeros, as the staged kernel's do.
template <int M>
__device__ __forceinline__ void finish_chains(const float (&acc)[M], double (&total)[M], int c) {
  for (; c < kWarps; ++c)
#pragma unroll
    for (int i = 0; i < M; ++i) total[i] = c == 0 ? double(acc[i]) : total[i] + double(acc[i]);
}

// The tile's outputs from a warpgroup's accumulators (d[4j + 2r + c]: output 64h + 16w + g + 8r
// of the tile, row 8j + 2t + c; w the warp in the warpgroup): float(total), then the optional
// bf16 rounding and post_scale (the staged kernel's epilogue; lin8 calls have no post_scale).
template <int NJ, class T>
__device__ __forceinline__ void store_tile(const TileArgs& ta, int64_t rows, const T (&total)[4 * NJ], int h, int w,
                                           int g, int t) {
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t o = ta.o0 + 64 * h + 16 * w + g + 8 * r;
        const int64_t row = ta.n0 + 8 * j + 2 * t + c;
        if (o >= ta.o_end || row >= rows) continue;
        float v = float(total[4 * j + 2 * r + c]);
        if (ta.round) v = round_bf16(v);
        if (ta.post_scale != 0.0f) v = round_bf16(v * ta.post_scale);
        ta.y[row * ta.out + o] = v;
      }
}
}  // namespace dsv4::gpu::mma::detail::wgmma
