// The MoE router's logits for many rows (prefill) on the FP64 tensor cores; included by
// moe_router.cu inside its anonymous namespace (uses its kChunk, pdl helpers).
//
// Same arithmetic as router_partials_kernel (moe_router.cu's file comment): per 512-wide chunk,
// slot l's 16 positions 128j + 4l + i in (j, i) order as an FMA chain from 0, the slots added in
// order, the chunks added in order. `mma.sync m16n8k16 f64` is exactly such a chain in k order
// (H200 probe: every output of 4,194,304 equal to fma(a15, b15, … fma(a0, b0, c)), so one MMA
// with a zero accumulator gives one slot's values for a 16-row × 8-expert tile, with k = 4j + i.
//
// CTA = kWideRows rows × kWideExperts experts (the E / 64 CTAs of a row block are adjacent, so x
// is read from HBM about once); warp w: rows 32·(w % 2) .. + 31 (2 m-tiles) × experts
// 16·(w / 2) .. + 15 (2 n-tiles). The K walk is in groups of 8 slots (128 positions: for each j,
// the 32 positions 128j + 32s .. + 31 of slot group s), staged once as doubles in shared memory
// ([row / expert][32j + 4u + i], rows 132 doubles apart: a fragment's 16-lane phase, 4 rows × 4
// positions, hits 16 distinct 8-byte banks); the next group is loaded into registers while the
// current one is multiplied. The whole logit (as a double) is written as chunk 0 of `partials`,
// so the route kernel runs with chunks = 1 and adds nothing to it — or, when the call has too few
// row blocks to fill the GPU, one CTA per chunk writes that chunk's value, as kernel 1 does.
#pragma once

constexpr int kWideRows = 64, kWideExperts = 64, kWideThreads = 256;
constexpr int kGroupPos = 128, kGroupsPerChunk = kChunk / kGroupPos, kWideStride = kGroupPos + 4;
constexpr int64_t kWideMinRows = 128;
constexpr size_t kWideSmem = sizeof(double) * (kWideRows + kWideExperts) * kWideStride;  // 135,168 B
constexpr int kWideXLoads = kWideRows * kGroupPos / 4 / kWideThreads;                   // float4: 8
static_assert(kChunk == 512 && kGroupsPerChunk == 4 && kWideRows * kGroupPos % (4 * kWideThreads) == 0);

// One slot group's raw inputs in registers: x (fp32) and the gate (bf16 as 8-value uint4, or fp32).
template <bool kBf16>
struct WideGroupRegs {
  static constexpr int kWLoads = kBf16 ? kWideExperts * kGroupPos / 8 / kWideThreads : kWideXLoads;  // 4 or 8
  float4 x[kWideXLoads];
  uint4 w[kWLoads];
};

// Group g = (chunk g / 4, slot group s = g % 4) → global position of staged position p = 32j + r:
// 512c + 128j + 32s + r.
__device__ __forceinline__ int64_t wide_group_k(int64_t g, int p) {
  return (g / kGroupsPerChunk) * kChunk + 128 * (p >> 5) + 32 * (g % kGroupsPerChunk) + (p & 31);
}
template <bool kBf16>
__device__ __forceinline__ void wide_load_gate(WideGroupRegs<kBf16>& v, const void* __restrict__ gate, int64_t D,
                                               int e0, int64_t g) {
#pragma unroll
  for (int m = 0; m < WideGroupRegs<kBf16>::kWLoads; ++m) {
    const int f = int(threadIdx.x) + kWideThreads * m;
    if constexpr (kBf16) {  // 16 uint4 per expert: 8 positions each
      const int e = f >> 4, p = 8 * (f & 15);
      v.w[m] = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(gate) + (e0 + e) * D + wide_group_k(g, p)));
    } else {  // 32 float4 per expert
      const int e = f >> 5, p = 4 * (f & 31);
      v.w[m] = __ldg(reinterpret_cast<const uint4*>(static_cast<const float*>(gate) + (e0 + e) * D + wide_group_k(g, p)));
    }
  }
}
template <bool kBf16>
__device__ __forceinline__ void wide_load_x(WideGroupRegs<kBf16>& v, const float* __restrict__ x, int64_t D,
                                            int64_t r0, int rg, int64_t g) {
#pragma unroll
  for (int m = 0; m < kWideXLoads; ++m) {
    const int f = int(threadIdx.x) + kWideThreads * m, row = min(f >> 5, rg - 1), p = 4 * (f & 31);
    v.x[m] = __ldg(reinterpret_cast<const float4*>(x + (r0 + row) * D + wide_group_k(g, p)));
  }
}
// Registers → staged doubles (exact conversions) at [row or expert][p].
template <bool kBf16>
__device__ __forceinline__ void wide_store_group(const WideGroupRegs<kBf16>& v, double* xs, double* ws) {
#pragma unroll
  for (int m = 0; m < kWideXLoads; ++m) {
    const int f = int(threadIdx.x) + kWideThreads * m;
    double2* d = reinterpret_cast<double2*>(xs + (f >> 5) * kWideStride + 4 * (f & 31));
    d[0] = make_double2(v.x[m].x, v.x[m].y);
    d[1] = make_double2(v.x[m].z, v.x[m].w);
  }
#pragma unroll
  for (int m = 0; m < WideGroupRegs<kBf16>::kWLoads; ++m) {
    const int f = int(threadIdx.x) + kWideThreads * m;
    const uint32_t u[4] = {v.w[m].x, v.w[m].y, v.w[m].z, v.w[m].w};
    if constexpr (kBf16) {
      double2* d = reinterpret_cast<double2*>(ws + (f >> 4) * kWideStride + 8 * (f & 15));
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const float2 f = bf16x2_to_float2(u[h]);
        d[h] = make_double2(f.x, f.y);
      }
    } else {
      double2* d = reinterpret_cast<double2*>(ws + (f >> 5) * kWideStride + 4 * (f & 31));
      d[0] = make_double2(__uint_as_float(u[0]), __uint_as_float(u[1]));
      d[1] = make_double2(__uint_as_float(u[2]), __uint_as_float(u[3]));
    }
  }
}

// per_chunk false: partials[r · E + e] = the logit of row r, expert e, in double (the route kernel
// runs with chunks = 1); true: CTA z computes chunk z only and writes its value to
// partials[(z · n + r) · E + e] (chunks = D / 512), for calls with too few row blocks to fill the
// GPU. Needs D % 512 == 0, E % 64 == 0, 16-byte aligned x and gate.
template <bool kBf16>
__global__ void __launch_bounds__(kWideThreads, 1)
    router_logits_wide_kernel(const float* __restrict__ x, int64_t n, int64_t D, const void* __restrict__ gate, int E,
                              bool per_chunk, double* __restrict__ partials) {
  extern __shared__ __align__(16) double wide_smem[];
  double* xs = wide_smem;                          // [kWideRows][kWideStride]
  double* ws = wide_smem + kWideRows * kWideStride;  // [kWideExperts][kWideStride]
  const int e0 = int(blockIdx.x) * kWideExperts;
  const int64_t r0 = int64_t(blockIdx.y) * kWideRows;
  const int rg = int(min(int64_t{kWideRows}, n - r0));
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
  const int rw = 32 * (warp & 1), ew = 16 * (warp >> 1);
  const int64_t g_begin = per_chunk ? int64_t(blockIdx.z) * kGroupsPerChunk : 0;
  const int64_t g_end = per_chunk ? g_begin + kGroupsPerChunk : D / kChunk * kGroupsPerChunk;
  WideGroupRegs<kBf16> regs;
  wide_load_gate(regs, gate, D, e0, g_begin);  // a parameter: safe before pdl_wait
  pdl_wait();
  pdl_trigger();
  wide_load_x(regs, x, D, r0, rg, g_begin);
  double total[2][2][4], chunk[2][2][4];  // [m-tile][n-tile] fragments
  for (int64_t gi = g_begin; gi < g_end; ++gi) {
    wide_store_group(regs, xs, ws);
    __syncthreads();
    if (gi + 1 < g_end) {
      wide_load_gate(regs, gate, D, e0, gi + 1);
      wide_load_x(regs, x, D, r0, rg, gi + 1);
    }
    const int s = int(gi % kGroupsPerChunk);
#pragma unroll 1
    for (int u = 0; u < 8; ++u) {  // slot 8s + u: staged positions 32j + 4u + i
      double a[2][8], b[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int i = 0; i < 8; ++i)
          a[mt][i] = xs[(rw + 16 * mt + g + 8 * (i % 2)) * kWideStride + 32 * (i / 2) + 4 * u + t];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) b[nt][i] = ws[(ew + 8 * nt + g) * kWideStride + 32 * i + 4 * u + t];
      const bool first_slot = s == 0 && u == 0;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          double d[4] = {0.0, 0.0, 0.0, 0.0};
          dmma_m16n8k16(d, a[mt], b[nt]);
#pragma unroll
          for (int i = 0; i < 4; ++i) chunk[mt][nt][i] = first_slot ? d[i] : chunk[mt][nt][i] + d[i];
        }
    }
    if (s == kGroupsPerChunk - 1) {
      const bool first_chunk = gi < g_begin + kGroupsPerChunk;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) total[mt][nt][i] = first_chunk ? chunk[mt][nt][i] : total[mt][nt][i] + chunk[mt][nt][i];
    }
    __syncthreads();  // the staged group is read before the next one is stored
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = rw + 16 * mt + g + 8 * h, e = e0 + ew + 8 * nt + 2 * t;
        if (row < rg)
          *reinterpret_cast<double2*>(partials + ((per_chunk ? int64_t(blockIdx.z) * n : 0) + r0 + row) * E + e) =
              make_double2(total[mt][nt][2 * h], total[mt][nt][2 * h + 1]);
      }
}
