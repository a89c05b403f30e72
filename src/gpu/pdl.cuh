// Programmatic dependent launch (PDL, sm_90+) for the decode step's many short kernels.
//
// A kernel launched with launch_pdl() may be scheduled while the previous kernel on its stream
// is still running. Contract for such kernels: call pdl_wait() before touching any memory that
// earlier work on the stream writes (every kernel here calls it first thing, so only the launch
// and the block scheduling overlap the predecessor's tail), then pdl_trigger() so that its own
// successor may be scheduled once all of this grid's blocks run. pdl_wait() returns at once
// for a plain launch, so the same kernel is also correct under <<<...>>>. Works inside CUDA
// graph capture (the edge becomes a programmatic dependency). DSV4_PDL=0 launches without the
// attribute (plain stream order), for A/B timing; see PdlScope for where it is used.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "gpu/cuda_check.h"
#include "gpu/pdl.h"

namespace dsv4::gpu {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launch attributes for cudaLaunchKernelEx: a thread-block cluster of `cluster` CTAs along x when
// cluster > 1, programmatic dependent launch when `pdl`. Returns how many it wrote.
inline unsigned cluster_pdl_attrs(cudaLaunchAttribute (&attr)[2], int cluster, bool pdl) {
  unsigned n = 0;
  if (cluster > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = unsigned(cluster);
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  return n;
}

// kernel<<<grid, block, smem, s>>>(args...) with the programmatic-serialization attribute;
// launch errors are thrown like CUDA_CHECK_LAUNCH.
template <typename... KArgs, typename... Args>
void launch_pdl(
    void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace dsv4::gpu
