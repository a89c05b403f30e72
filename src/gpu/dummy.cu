// Random weights generated directly on the GPU in checkpoint formats (--load-format dummy).
//
// Design: a counter-based hash (splitmix64 of seed ⊕ index) per element, so fills are
// deterministic and need no state. e4m3 codes use exponent fields 3..9 (|w| in [2^-4, 2^3))
// with random sign/mantissa — with an e8m0 scale of 2^-7 that gives |w·s| ≲ 0.06, a sane
// magnitude; FP4 bytes hold two random non-NaN nibbles (all e2m1 codes are finite).
#include "gpu/cuda_check.h"
#include "gpu/ops.h"

namespace dsv4::gpu {
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ float uniform_pm1(uint64_t h) {  // [-1, 1)
  return float(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void e4m3_kernel(uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed ^ (uint64_t(i) * 0x632be59bd9b4e019ull));
    const uint8_t exp = 3 + uint8_t((h >> 8) % 7), man = uint8_t(h & 7), sign = uint8_t((h >> 16) & 1) << 7;
    p[i] = sign | (exp << 3) | man;
  }
}
__global__ void fp4_kernel(uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = uint8_t(mix64(seed ^ (uint64_t(i) * 0x632be59bd9b4e019ull)));
}
__global__ void byte_kernel(uint8_t* p, int64_t n, uint8_t v) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = v;
}
__global__ void bf16_kernel(uint16_t* p, int64_t n, float amp, float mean, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = mean + amp * uniform_pm1(mix64(seed ^ (uint64_t(i) * 0x632be59bd9b4e019ull)));
    p[i] = uint16_t(__float_as_uint(v) >> 16);
  }
}
__global__ void f32_kernel(float* p, int64_t n, float amp, float mean, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = mean + amp * uniform_pm1(mix64(seed ^ (uint64_t(i) * 0x632be59bd9b4e019ull)));
}
__global__ void ids_kernel(int32_t* p, int64_t n, int modulo, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = int32_t(mix64(seed ^ (uint64_t(i) * 0x632be59bd9b4e019ull)) % uint64_t(modulo));
}

constexpr int kThreads = 256;
unsigned grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

}  // namespace

void fill_random_e4m3(uint8_t* p, int64_t n, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  e4m3_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, seed);
  CUDA_CHECK_LAUNCH();
}
void fill_random_fp4(uint8_t* p, int64_t n, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  fp4_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, seed);
  CUDA_CHECK_LAUNCH();
}
void fill_e8m0(uint8_t* p, int64_t n, uint8_t value, cudaStream_t s) {
  if (n == 0) return;
  byte_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, value);
  CUDA_CHECK_LAUNCH();
}
void fill_random_bf16(uint16_t* p, int64_t n, float amp, float mean, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, amp, mean, seed);
  CUDA_CHECK_LAUNCH();
}
void fill_random_f32(float* p, int64_t n, float amp, float mean, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  f32_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, amp, mean, seed);
  CUDA_CHECK_LAUNCH();
}
void fill_random_ids(int32_t* p, int64_t n, int modulo, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  ids_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, modulo, seed);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
