// P2pAllReduce (p2p_all_reduce.h): the one-shot kernel and its buffers.
#include "gpu/p2p_all_reduce.h"

#include "base/check.h"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/hc_post_device.cuh"
#include "gpu/pdl.cuh"

namespace dsv4::gpu {
namespace {

struct OneShotArgs {
  float* x = nullptr;
  int64_t count = 0;
  int rank = 0, size = 0;
  bool vec4 = false;  // x is 16-byte aligned: float4 loads and stores
  float* buffers[P2pAllReduce::kMaxRanks] = {};  // each rank's receive slots [3][size][max_floats]
  uint32_t* epochs = nullptr;                    // this rank's [kBlocks]
  int64_t max_floats = 0;
  const volatile int* abort = nullptr;
  P2pAllReduce::HcPost hc;  // hc.streams == nullptr: no epilogue
};

// The value of an empty receive slot: a signalling NaN, which arithmetic never produces (it
// quiets NaNs); an input with these bits is sent, and summed, as the canonical quiet NaN.
constexpr uint32_t kEmpty = P2pAllReduce::kEmptyBits;
__device__ __forceinline__ float clean(float v) {
  return __float_as_uint(v) == kEmpty ? __uint_as_float(0x7fffffffu) : v;
}
__device__ __forceinline__ float4 clean(float4 v) { return make_float4(clean(v.x), clean(v.y), clean(v.z), clean(v.w)); }
__device__ __forceinline__ bool empty(float v) { return __float_as_uint(v) == kEmpty; }
__device__ __forceinline__ bool empty(float4 v) { return empty(v.x) || empty(v.y) || empty(v.z) || empty(v.w); }
__device__ __forceinline__ void set_empty(float* p) { *p = __uint_as_float(kEmpty); }
__device__ __forceinline__ void set_empty(float4* p) {
  const float e = __uint_as_float(kEmpty);
  *p = make_float4(e, e, e, e);
}

// Stores into a peer's memory (NVLink) and polls of our own receive slots: volatile (relaxed,
// system scope) accesses, never kept in a register or served from a stale L1 line.
__device__ __forceinline__ void store_peer(float4* p, float4 v) {
  asm volatile("st.volatile.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ void store_peer(float* p, float v) {
  asm volatile("st.volatile.global.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ float4 load_peer(const float4* p) {
  float4 v;
  asm volatile("ld.volatile.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ float load_peer(const float* p) {
  float v;
  asm volatile("ld.volatile.global.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}

// Polls slot p until every value has arrived (or the group is aborted), then empties it.
template <class T>
__device__ __forceinline__ T receive(T* p, const volatile int* abort) {
  T v = load_peer(p);
  for (uint32_t spins = 0; empty(v); ++spins) {
    if ((spins & 1023u) == 1023u && *abort != 0) break;
    v = load_peer(p);
  }
  set_empty(p);
  return v;
}

// Block b: slice [lo, hi) of x (the same on every rank). See the header for the protocol.
__global__ void __launch_bounds__(P2pAllReduce::kThreads) one_shot_all_reduce(OneShotArgs a) {
  // Under programmatic dependent launch: x is written by the predecessor (wait first); the
  // successor may be scheduled once every block runs (it waits for this grid's completion).
  pdl_wait();
  pdl_trigger();
  __shared__ uint32_t epoch_s;
  const int b = blockIdx.x;
  if (threadIdx.x == 0) {
    const uint32_t e = a.epochs[b] + 1;
    a.epochs[b] = e;
    epoch_s = e;
  }
  __syncthreads();
  // Receive slots: buffers[r] = [3 generations][size senders][max_floats]; call e uses e % 3.
  const int64_t slot = a.max_floats, gen_offset = int64_t(epoch_s % 3u) * a.size * slot;
  const int64_t per = ((a.count + P2pAllReduce::kBlocks - 1) / P2pAllReduce::kBlocks + 3) / 4 * 4;
  const int64_t lo = b * per < a.count ? b * per : a.count;
  const int64_t hi = lo + per < a.count ? lo + per : a.count;
  const int64_t lo4 = lo / 4, hi4 = a.vec4 ? hi / 4 : lo4;  // float4 part [lo4·4, hi4·4), then the tail
  // The tail [tail, hi): never below lo (an empty slice at lo = hi = count must not redo the last
  // elements another block owns).
  const int64_t tail = hi4 * 4 > lo ? hi4 * 4 : lo;

  // 1. Push this rank's slice into every peer's receive slot for this rank (posted NVLink
  //    stores: the data is its own flag).
  for (int peer = 0; peer < a.size; ++peer) {
    if (peer == a.rank) continue;
    float* dst = a.buffers[peer] + gen_offset + int64_t(a.rank) * slot;
    for (int64_t i = lo4 + threadIdx.x; i < hi4; i += blockDim.x)
      store_peer(reinterpret_cast<float4*>(dst) + i, clean(reinterpret_cast<const float4*>(a.x)[i]));
    for (int64_t i = tail + threadIdx.x; i < hi; i += blockDim.x) store_peer(dst + i, clean(a.x[i]));
  }

  // 2. Sum over ranks 0..n−1 in order as the peers' values arrive in local memory (each thread
  //    reads back only the elements it pushed, so x is still this rank's input).
  float* recv = a.buffers[a.rank] + gen_offset;
  for (int64_t i = lo4 + threadIdx.x; i < hi4; i += blockDim.x) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int r = 0; r < a.size; ++r) {
      const float4 v = r == a.rank ? clean(reinterpret_cast<const float4*>(a.x)[i])
                                   : receive(reinterpret_cast<float4*>(recv + int64_t(r) * slot) + i, a.abort);
      if (r == 0) {
        s = v;
      } else {
        s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
      }
    }
    reinterpret_cast<float4*>(a.x)[i] = s;
    if (a.hc.streams != nullptr) {  // float4 i = positions 4i .. 4i + 3 of token 4i / dim
      const int64_t nv = a.hc.dim / 4, t = i / nv;
      hc_post4_apply(s, a.hc.post + t * 4, a.hc.comb + t * 16, reinterpret_cast<float4*>(a.hc.streams + t * 4 * a.hc.dim),
                     nv, i % nv, true);
    }
  }
  for (int64_t i = tail + threadIdx.x; i < hi; i += blockDim.x) {
    float s = 0.f;
    for (int r = 0; r < a.size; ++r) {
      const float v = r == a.rank ? clean(a.x[i]) : receive(recv + int64_t(r) * slot + i, a.abort);
      s = r == 0 ? v : s + v;
    }
    a.x[i] = s;
  }
}

__global__ void fill_empty(float* p, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    set_empty(p + i);
}

// Switches to `device` for the lifetime of the object.
struct DeviceScope {
  int saved = 0;
  explicit DeviceScope(int device) {
    CUDA_CHECK(cudaGetDevice(&saved));
    CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(saved); }
};

}  // namespace

bool P2pAllReduce::supported(int size) {
  if (size < 2 || size > kMaxRanks) return false;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < size) return false;
  for (int i = 0; i < size; ++i)
    for (int j = 0; j < size; ++j) {
      int ok = 0;
      if (i != j && (cudaDeviceCanAccessPeer(&ok, i, j) != cudaSuccess || ok == 0)) return false;
    }
  return true;
}

P2pAllReduce::P2pAllReduce(int size, int64_t max_floats) : size_(size), max_floats_(max_floats) {
  DSV4_CHECK(supported(size), "P2pAllReduce: devices 0..", size - 1, " lack peer access to each other");
  DSV4_CHECK(max_floats > 0 && max_floats % 4 == 0, "P2pAllReduce: max_floats ", max_floats, " must be a positive multiple of 4");
  int* host = nullptr;
  CUDA_CHECK(cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  *host = 0;
  abort_host_ = host;
  ranks_.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    DeviceScope scope(r);
    for (int j = 0; j < size; ++j) {
      if (j == r) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(j, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // clears the sticky-free error
      } else {
        CUDA_CHECK(e);
      }
    }
    Rank& k = ranks_[r];
    const int64_t slots = int64_t{kGenerations} * size * max_floats;
    CUDA_CHECK(cudaMalloc(&k.buffers, sizeof(float) * static_cast<size_t>(slots)));
    CUDA_CHECK(cudaMalloc(&k.epochs, sizeof(uint32_t) * kBlocks));
    fill_empty<<<256, 256>>>(k.buffers, slots);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemset(k.epochs, 0, sizeof(uint32_t) * kBlocks));
    if (r == 0) CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&abort_device_), host, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
}

P2pAllReduce::~P2pAllReduce() {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    DeviceScope scope(static_cast<int>(r));
    cudaFree(ranks_[r].buffers);
    cudaFree(ranks_[r].epochs);
  }
  if (abort_host_ != nullptr) cudaFreeHost(const_cast<int*>(abort_host_));
}

bool P2pAllReduce::fits(const float* x, int64_t count, const HcPost& hc) {
  return hc.dim > 0 && hc.dim % 4 == 0 && count % hc.dim == 0 && aligned16(x) && aligned16(hc.post) &&
         aligned16(hc.comb) && aligned16(hc.streams);
}

void P2pAllReduce::run(int rank, float* x, int64_t count, cudaStream_t stream, const HcPost* hc) {
  DSV4_CHECK(rank >= 0 && rank < size_, "P2pAllReduce: rank ", rank, " of ", size_);
  DSV4_CHECK(count >= 0 && count <= max_floats_, "P2pAllReduce: ", count, " floats, at most ", max_floats_);
  DSV4_CHECK(hc == nullptr || fits(x, count, *hc), "P2pAllReduce: the hc_post epilogue needs dim % 4 == 0 (dim ",
             hc == nullptr ? 0 : hc->dim, "), count a multiple of dim (count ", count, ") and 16-byte aligned pointers");
  OneShotArgs a;
  if (hc != nullptr) a.hc = *hc;
  a.x = x;
  a.count = count;
  a.rank = rank;
  a.size = size_;
  a.vec4 = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  for (int r = 0; r < size_; ++r) {
    a.buffers[r] = ranks_[r].buffers;
  }
  a.epochs = ranks_[rank].epochs;
  a.max_floats = max_floats_;
  a.abort = abort_device_;
  launch_pdl(one_shot_all_reduce, kBlocks, kThreads, 0, stream, a);  // PDL inside a PdlScope
}

void P2pAllReduce::abort() {
  if (abort_host_ != nullptr) *abort_host_ = 1;
}

}  // namespace dsv4::gpu
