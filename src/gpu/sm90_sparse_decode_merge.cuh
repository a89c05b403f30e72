// The two ways the sm_90a sparse decode attention combines a row's split partials (design:
// sm90_sparse_decode.cu's header, docs/attention-decode.md): the in-cluster merge's tail
// (distributed shared memory, one launch; each kernel's epilogue stages its partial O and calls
// it) and the merge kernel (global partials, long lists), plus the bf16 output store both use.
// Part of each kernel's translation unit (sm90_sparse_decode.cu, sm90_sparse_decode_ws.cu):
// included once, inside its anonymous namespace, after its constants, Smem (s, ml, alpha,
// stamp) and sm90_sparse_decode_rows.cuh — not a standalone header.
#pragma once

// Writes bf16-rounded v (2 values of head h, dims d, d+1) to the output row.
__device__ __forceinline__ void store_out2(const SparseDecodeArgs& a, int64_t at, float x, float y) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
  if (a.out_f32 != nullptr)
    *reinterpret_cast<float2*>(a.out_f32 + at) = __bfloat1622float2(v);
  else
    *reinterpret_cast<__nv_bfloat162*>(a.out + at) = v;
}

// 32-bit shared::cluster address of `p` in CTA `rank` of the cluster, and loads through it
// (32-bit addresses keep the merge's 16 remote bases in 16 registers, not 32).
__device__ __forceinline__ uint32_t cluster_addr(const void* p, int rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr(p)), "r"(rank));
  return r;
}
__device__ __forceinline__ float2 ld_cluster2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0,%1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ float4 ld_cluster4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr));
  return v;
}

// In-cluster merge (the row's `splits` CTAs form one thread-block cluster, rank = split):
// every CTA stores its unnormalized O in its own smem (over q and k), the cluster barrier makes
// the partials and (m, l) visible, then CTA `split` merges the split-th slice of the row's
// H × 512 outputs reading all partials through distributed shared memory, in split order:
// M = max m_s, O = Σ e^(m_s−M) O_s / (Σ e^(m_s−M) l_s + e^(sink−M)) — the merge kernel's
// formula, without the global partials and the second launch. A second barrier keeps every
// CTA's smem alive until the cluster is done reading it.
// The part after the first barrier, for S = splits (a power of two; S = 16 also stands for any
// `splits`, one unit per round): a thread merges the float4 units u_first, u_first + kThreads,
// … < u1, 16 / S of them per round, so that up to 16 DSMEM loads are in flight per thread (the
// first round is requested before the (m, l) exchange).
template <int S, bool kProbe>
__device__ __forceinline__ void cluster_merge_tail(Smem& sm, const SparseDecodeArgs& a, const float* part,
                                                   int splits, int u_first, int u1, int64_t q_off, int H,
                                                   const float* __restrict__ sink) {
  constexpr int U = kMaxCluster / S;
  const int tid = threadIdx.x;
  float4 v[U][S];
  auto load_round = [&](int u0) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int u = u0 + j * kThreads;
      if (u < u1) {
        const int h = u / (kHeadDim / 4), c = (u % (kHeadDim / 4)) * 4;
#pragma unroll
        for (int s = 0; s < S; ++s)
          if (s < splits) v[j][s] = ld_cluster4(cluster_addr(part + h * kPartS + c, s));
      }
    }
  };
  // (m, l) of every (split, head): ≤ 16 × 64 pairs, two per thread, copied to local smem; then
  // per head the weights e^(m_s − M) and 1 / (Σ w_s·l_s + e^(sink − M)).
  float* wgt = sm.s;                           // [S][64]
  float* m_all = sm.s + kMaxCluster * kHeads;  // [S][64]
  float* l_all = m_all + kMaxCluster * kHeads;
  float2 ml2[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int i = tid + k * kThreads, s = i / H, h = i - s * H;
    if (s < splits) ml2[k] = ld_cluster2(cluster_addr(&sm.ml[h], s));
  }
  load_round(u_first);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int i = tid + k * kThreads, s = i / H, h = i - s * H;
    if (s < splits) {
      m_all[s * kHeads + h] = ml2[k].x;
      l_all[s * kHeads + h] = ml2[k].y;
    }
  }
  __syncthreads();
  if (tid < H) {
    float big = -INFINITY;
    for (int s = 0; s < splits; ++s) big = fmaxf(big, m_all[s * kHeads + tid]);
    float l = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float m = m_all[s * kHeads + tid];
      const float w = m == -INFINITY ? 0.0f : __expf(m - big);
      wgt[s * kHeads + tid] = w;
      l = fmaf(w, l_all[s * kHeads + tid], l);
    }
    sm.alpha[tid] = big == -INFINITY ? 0.0f : 1.0f / (l + __expf(sink[tid] - big));
  }
  __syncthreads();
  probe_mark<kProbe>(sm, 10);
  for (int u0 = u_first; u0 < u1; u0 += U * kThreads) {
    if (u0 != u_first) load_round(u0);
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int u = u0 + j * kThreads;
      if (u >= u1) break;
      const int h = u / (kHeadDim / 4), c = (u % (kHeadDim / 4)) * 4;
      float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const float w = s < splits ? wgt[s * kHeads + h] : 0.0f;
        if (w != 0.0f) {  // empty splits and heads without candidates hold no partial
          acc.x = fmaf(w, v[j][s].x, acc.x);
          acc.y = fmaf(w, v[j][s].y, acc.y);
          acc.z = fmaf(w, v[j][s].z, acc.z);
          acc.w = fmaf(w, v[j][s].w, acc.w);
        }
      }
      const float inv = sm.alpha[h];
      const int64_t at = q_off + h * kHeadDim + c;
      store_out2(a, at, acc.x * inv, acc.y * inv);
      store_out2(a, at + 2, acc.z * inv, acc.w * inv);
    }
  }
}

// NT: n8 tiles (8 dims each) per warp in P·V: 16 (4 warps per head tile, up to 4 tiles), 8
// (8 warps per tile, 2 tiles) or 4 (16 warps on one tile) — by the plan's group_tiles.
// Merge: one CTA of 128 threads per (row, head); thread i owns dims 4i..4i+3. The splits' m
// and l are read in parallel (threads stride over splits) and reduced in a fixed order, the
// weights e^(m_s − M) staged in smem, then the partials accumulated with several loads in
// flight (a dependent chain of one L2 round trip per split was the serial part).
__global__ void __launch_bounds__(128) merge_kernel(const __grid_constant__ SparseDecodeArgs a,
                                                    int splits, const float* __restrict__ ws) {
  __shared__ float w_s[kMaxSplits];
  __shared__ float red[4];
  pdl_wait();  // the split kernel's partials
  pdl_trigger();
  const int H = a.heads, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r = blockIdx.x / H, h = blockIdx.x % H;
  const float* ml = ws + int64_t(r) * splits * H * 2;
  const float* po = ws + int64_t(a.rows) * splits * H * 2 + int64_t(r) * splits * H * kHeadDim +
                    h * kHeadDim;
  float big = -INFINITY;
  for (int s = tid; s < splits; s += 128) big = fmaxf(big, ml[(s * H + h) * 2]);
  for (int off = 16; off > 0; off >>= 1) big = fmaxf(big, __shfl_xor_sync(~0u, big, off));
  if (lane == 0) red[warp] = big;
  __syncthreads();
  big = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  __syncthreads();  // red is reused below
  float l = 0.0f;
  for (int s = tid; s < splits; s += 128) {
    const float m = ml[(s * H + h) * 2];
    const float w = m == -INFINITY ? 0.0f : __expf(m - big);
    w_s[s] = w;
    l += w * ml[(s * H + h) * 2 + 1];
  }
  for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(~0u, l, off);
  if (lane == 0) red[warp] = l;
  __syncthreads();
  l = (red[0] + red[1]) + (red[2] + red[3]);
  float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll 8
  for (int s = 0; s < splits; ++s) {
    const float w = w_s[s];
    if (w != 0.0f) {  // empty splits wrote no partial
      const float4 v =
          *reinterpret_cast<const float4*>(po + int64_t(s) * H * kHeadDim + threadIdx.x * 4);
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
  }
  const float inv = big == -INFINITY ? 0.0f : 1.0f / (l + __expf(a.sink[h] - big));
  const int64_t at = (int64_t(r) * H + h) * kHeadDim + threadIdx.x * 4;
  const __nv_bfloat162 v0 = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  const __nv_bfloat162 v1 = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
  if (a.out_f32 != nullptr) {
    const float2 f0 = __bfloat1622float2(v0), f1 = __bfloat1622float2(v1);
    *reinterpret_cast<float4*>(a.out_f32 + at) = make_float4(f0.x, f0.y, f1.x, f1.y);
  } else {
    reinterpret_cast<__nv_bfloat162*>(a.out + at)[0] = v0;
    reinterpret_cast<__nv_bfloat162*>(a.out + at)[1] = v1;
  }
}
