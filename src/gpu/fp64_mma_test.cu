// The hardware fact the prefill FP64 kernels build on (linear_small_out.cu's wide partials,
// moe_router_wide.cuh), through their wrapper dmma_m16n8k16 (device_math.cuh): `mma.sync m16n8k16 f64` computes every output as the sequential chain
// fma(a15, b15, … fma(a1, b1, fma(a0, b0, c))) in k order, rounding each step — the same bits as
// the vector kernels' FMA chains. Fresh random fp32-valued operands (the models' case: products
// exact in double) and accumulators with their own low bits. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/gpu_test_util.h"

namespace dsv4::gpu {
namespace {

// One 16 × 8 × 16 tile per warp: A [16][16] row-major, B [8][16] (column n's 16 k values), C / D [16][8].
__global__ void mma_m16n8k16_tiles(const double* A, const double* B, const double* C, double* D, int tiles) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (tile >= tiles) return;
  const double* a = A + tile * 256;
  const double* b = B + tile * 128;
  const double* c = C + tile * 128;
  double fa[8], fb[4], d[4];
  for (int i = 0; i < 8; ++i) fa[i] = a[(g + 8 * (i % 2)) * 16 + t + 4 * (i / 2)];
  for (int i = 0; i < 4; ++i) fb[i] = b[g * 16 + t + 4 * i];
  for (int i = 0; i < 4; ++i) d[i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + (i % 2)];
  dmma_m16n8k16(d, fa, fb);
  for (int i = 0; i < 4; ++i) D[tile * 128 + (g + 8 * (i / 2)) * 8 + 2 * t + (i % 2)] = d[i];
}

TEST(Fp64MmaTest, M16n8k16IsTheSequentialFmaChain) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const int tiles = 4096;
  std::mt19937_64 rng(20261201);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<double> A(tiles * 256), B(tiles * 128), C(tiles * 128);
  for (double& v : A) v = nd(rng);
  for (double& v : B) v = double(nd(rng) * 0.02f);
  for (double& v : C) v = double(nd(rng)) * nd(rng) + double(nd(rng)) * nd(rng);
  auto dA = to_device(A), dB = to_device(B), dC = to_device(C);
  DeviceBuffer<double> dD(C.size());
  mma_m16n8k16_tiles<<<tiles / 8, 256>>>(dA.get(), dB.get(), dC.get(), dD.get(), tiles);
  CUDA_CHECK_LAUNCH();
  const auto D = dD.download();
  int64_t chain = 0, once = 0;
  for (int tile = 0; tile < tiles; ++tile)
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        const double* a = &A[tile * 256 + r * 16];
        const double* b = &B[tile * 128 + n * 16];
        double h = C[tile * 128 + r * 8 + n];
        long double s = h;
        for (int k = 0; k < 16; ++k) {
          h = std::fma(a[k], b[k], h);
          s += static_cast<long double>(a[k]) * b[k];
        }
        const double got = D[tile * 128 + r * 8 + n];
        chain += got == h;
        once += got == static_cast<double>(s);
      }
  EXPECT_EQ(chain, int64_t{tiles} * 128) << "outputs equal to the k-order FMA chain";
  // The test can tell the two apart: a single rounding of the exact sum differs often.
  EXPECT_LT(once, int64_t{tiles} * 128 * 9 / 10);
}

}  // namespace
}  // namespace dsv4::gpu
