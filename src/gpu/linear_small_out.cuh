// Device half of the small-output split-K linear (linear_small_out.cu), shared with the kernels
// that take its partial sums directly (mhc.cu: the mHC projection reduced inside hc_pre).
#pragma once

#include <cstdint>

namespace dsv4::gpu {

// Warp-collective: the total of output `pair` (= row · out + o) over `chunks` double partials
// laid out [chunks][stride] (stride = rows · out): lane l adds chunks l, l + 32, … in order, then
// an xor butterfly. Every lane returns the same value; the order is the one linear_small_out.cu
// documents, so every consumer gets the same bits.
__device__ __forceinline__ double small_out_reduce_warp(const double* __restrict__ partial,
                                                        int64_t chunks,
                                                        int64_t stride,
                                                        int64_t pair) {
  const int lane = threadIdx.x & 31;
  double v = 0.0;
  for (int64_t c = lane; c < chunks; c += 32) v += partial[c * stride + pair];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

}  // namespace dsv4::gpu
