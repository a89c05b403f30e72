// hc_post for hc = 4 on 4 consecutive hidden positions (spec §4.3, the mHC post-mix): shared by
// mhc.cu's kernel and the all-reduce that fuses it (p2p_all_reduce.cu), so both give the same bits.
#pragma once

#include <cstdint>

#include "gpu/device_math.cuh"

namespace dsv4::gpu {

// streams X = [4][nv] float4 of one token (nv = dim / 4), position block kv; f = the sub-layer
// output at those positions, rounded to bf16 first when round_f; post_t [4], comb_t [4][4] of the
// token (16-byte aligned). X[j][kv] ← bf16(post[j]·f + Σ_i comb[i][j]·X[i][kv]) in i order.
__device__ __forceinline__ void hc_post4_apply(float4 f, const float* __restrict__ post_t,
                                               const float* __restrict__ comb_t, float4* X, int64_t nv,
                                               int64_t kv, bool round_f) {
  float4 in[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) in[i] = X[i * nv + kv];
  float cb[16];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 c = __ldg(reinterpret_cast<const float4*>(comb_t) + q);
    cb[4 * q] = c.x;
    cb[4 * q + 1] = c.y;
    cb[4 * q + 2] = c.z;
    cb[4 * q + 3] = c.w;
  }
  const float4 pv = __ldg(reinterpret_cast<const float4*>(post_t));
  const float po[4] = {pv.x, pv.y, pv.z, pv.w};
  auto one = [&](float fv, float a, float b, float c, float d, int j) {
    if (round_f) fv = round_bf16(fv);
    float mix = cb[0 * 4 + j] * a;
    mix += cb[1 * 4 + j] * b;
    mix += cb[2 * 4 + j] * c;
    mix += cb[3 * 4 + j] * d;
    return round_bf16(po[j] * fv + mix);
  };
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    X[j * nv + kv] = make_float4(one(f.x, in[0].x, in[1].x, in[2].x, in[3].x, j),
                                 one(f.y, in[0].y, in[1].y, in[2].y, in[3].y, j),
                                 one(f.z, in[0].z, in[1].z, in[2].z, in[3].z, j),
                                 one(f.w, in[0].w, in[1].w, in[2].w, in[3].w, j));
  }
}

}  // namespace dsv4::gpu
