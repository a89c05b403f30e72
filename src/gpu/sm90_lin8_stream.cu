// lin8 for decode-size calls (1 … 64 rows) on sm_90a warpgroup MMAs, the weights streamed by the
// tensor-memory accelerator: the same bits as every other lin8 kernel (linear_mma.h numerics).
//
// Why another form: the register-fed tiles (linear_mma.cu) run at 16–64 rows at 15–40 % of HBM
// (docs/decode-linears.md). Here one thread per CTA keeps a ring of boxes of 128 weight rows ×
// 128 bytes in flight (cp.async.bulk.tensor onto mbarriers), and the MMAs are warpgroup MMAs.
// Measured (H200, round 15 of docs/decode-linears.md): faster where the call has ≥ 120 tiles and
// ≥ 9 rows (wq_b 32768 × 1024 at 64 rows 42.3 → 32.8 µs); slower at one row and wherever the
// cluster split below runs — linear_mma_dispatch.cu takes it only where it wins.
//
// Why the same bits: per 128-K block a fresh chain of 8 f16 MMA k16 steps over the block's e4m3
// values converted exactly to f16, step s of lane (g, t) taking physical k 32t + 4s + {0, 1} into
// MMA k {2t, 2t+1} and 32t + 4s + {2, 3} into {2t+8, 2t+9} (sm90_lin8_bulk.cu: 8 chained `wgmma
// m64nNk16 f16` over the same values in the same k positions give the mma.sync chain's bits);
// then acc = acc + part·(s_x·s_w) in fp32 over chain c's blocks c, c + 8, … and the chains' sums
// added in chain order (--fmad=false: no contraction).
//
// CTA = 2 consumer warpgroups + 1 producer warp (288 threads); tile = 128 outputs × N rows (N =
// 8·NJ, NJ ∈ {1, 2, 4, 8}). Warpgroup h owns outputs [64h, +64): per block, `wgmma m64nNk16 f16`
// with A from registers — lane (g, t) of warp w converts bytes 32t .. 32t + 31 of weight rows
// 16w + g and 16w + g + 8 (step s: word s) — and B the block's activations, which the consumers
// convert once per block into an f16 tile (the bulk kernel's 128-byte-swizzled K-major layout,
// double-buffered) before a named barrier. A cluster of S CTAs (x) splits the 8 chains of one
// tile: rank r walks chains [r·8/S, (r+1)·8/S), keeps each chain's sum in registers, parks them
// in its (then idle) ring, and after a cluster barrier rank r adds all 8 chains in order for its
// 128/S outputs, reading the other CTAs' chains through distributed shared memory.
#include <cooperative_groups.h>

#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/linear_mma_common.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_tma_stream.cuh"
#include "gpu/sm90_wgmma_common.cuh"

namespace dsv4::gpu::mma::detail {
namespace {

using namespace wgmma;
using namespace stream;
namespace cg = cooperative_groups;

constexpr int kOut = 128;                      // outputs of a CTA tile (one weight-scale row)
constexpr int64_t kStreamMaxRows = 64;
constexpr int kConsumers = 256, kThreads = kConsumers + 32;
constexpr int kWBytes = kOut * 128;            // a block's weight box: 128 rows × 128 codes

// Per row tile (NJ n8 fragments): ring depth, K blocks whose activation scales fit, chains a CTA
// of a cluster (S ≥ 2) holds in registers, CTAs an SM (≤ 16 rows: two, ≤ 113 registers).
template <int NJ>
struct Layout {
  static constexpr int kStages = NJ <= 2 ? 5 : NJ == 4 ? 6 : 5;
  static constexpr int kMaxKBlocks = NJ <= 2 ? 128 : 64;
  static constexpr int kMaxHeld = NJ <= 2 ? 4 : NJ == 4 ? 2 : 1;
  static constexpr int kMinBlocks = NJ <= 2 ? 2 : 1;
  static constexpr int kRows = 8 * NJ;
  static constexpr int kXRaw = kRows * 128;    // the block's activation codes, row-major
  static constexpr int kStage = kWBytes + kXRaw;          // a multiple of 1024
  static constexpr int kXF16 = kRows * 256;    // an f16 B tile: two atoms of kRows × 128 B
  static constexpr int kTiles = kStages * kStage;         // two B tiles (block n: tile n % 2)
  static constexpr int kBars = kTiles + 2 * kXF16;        // full[kStages], empty[kStages]
  static constexpr int kSw = kBars + 2 * kStages * 8;     // weight scales [kblocks]
  static constexpr int kXs = kSw + kMaxKBlocks * 4;       // activation scales [kblocks][kRows]
  static constexpr int kSmem = 1024 + kXs + kMaxKBlocks * kRows * 4;
  static_assert(kStage % 1024 == 0, "stages must keep the 1024-byte swizzle alignment");
  static_assert(kMaxHeld * kOut * kRows * 4 <= kTiles, "the held chains must fit in the ring");
  static_assert(kSmem <= 232448 / kMinBlocks, "shared memory for kMinBlocks CTAs an SM");
};

struct Maps {
  CUtensorMap w[kMaxDenseSegments];  // weights [out, in] of each segment (or the one weight)
  CUtensorMap x;                     // activation codes [rows, in]
};

template <int NJ>
__global__ void __launch_bounds__(kThreads, Layout<NJ>::kMinBlocks)
    lin8_stream_kernel(Args a, const __grid_constant__ Maps maps, int S) {
  using L = Layout<NJ>;
  constexpr int kStages = L::kStages, kMaxHeld = L::kMaxHeld;
  constexpr int N = L::kRows;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* sm = smem_1024(smem_raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(sm + L::kBars);
  uint64_t* empty = full + kStages;
  float* sw_s = reinterpret_cast<float*>(sm + L::kSw);
  float* xs_s = reinterpret_cast<float*>(sm + L::kXs);  // [kb][row]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rank = int(blockIdx.x) % S, held = kWarps / S, c0 = rank * held;
  TileArgs ta = resolve_tile(a, kOut, N);
  ta.n0 = int64_t(blockIdx.x / S) * N;
  const int kblocks = int(a.in / 128);
  // The CTA's blocks: nloc of the chains' order (chain_block32) from its first chain's, base.
  int base = 0, nloc = 0;
  for (int c = 0; c < c0 + held; ++c) (c < c0 ? base : nloc) += int(chain_blocks(c, kblocks));

  ring_init<kStages>(full, empty, 1, kConsumers / 32);
  __syncthreads();  // the barriers initialized

  if (warp == kConsumers / 32) {  // ---- producer: one lane issues every copy ----
    if (lane == 0) {
      const CUtensorMap* wmap = segment_map(maps.w, ta.seg);
      // The first ring's weights before the wait (weights are not written by earlier kernels),
      // its activations after it, then one block per released stage.
      const int first = nloc < kStages ? nloc : kStages;
      for (int n = 0; n < first; ++n) {
        mbar_expect_tx(full + n, kWBytes + L::kXRaw);
        tma_load_2d(sm + n * L::kStage, wmap, chain_block32(base + n, kblocks) * 128, int(ta.o0), full + n,
                    wgmma::kL2EvictFirst);
      }
      pdl_wait();
      pdl_trigger();
      for (int n = 0; n < first; ++n)
        tma_load_2d(sm + n * L::kStage + kWBytes, &maps.x, chain_block32(base + n, kblocks) * 128, int(ta.n0),
                    full + n);
      for (int n = first; n < nloc; ++n) {
        const int s = n % kStages, kb = chain_block32(base + n, kblocks);
        uint8_t* st = sm + s * L::kStage;
        mbar_wait(empty + s, uint32_t((n / kStages - 1) & 1));
        mbar_expect_tx(full + s, kWBytes + L::kXRaw);
        tma_load_2d(st, wmap, kb * 128, int(ta.o0), full + s, wgmma::kL2EvictFirst);
        tma_load_2d(st + kWBytes, &maps.x, kb * 128, int(ta.n0), full + s);
      }
    }
    __syncwarp();
  } else {  // ---- consumers ----
    // Weight scales are not written by earlier kernels: read before the wait.
    for (int i = threadIdx.x; i < kblocks; i += kConsumers)
      sw_s[i] = e8m0_to_float(__ldg(ta.ws + (ta.o0 / 128) * kblocks + i));
    pdl_wait();
    for (int i = threadIdx.x; i < kblocks * N; i += kConsumers) {
      const int kb = i / N, r = i % N;
      xs_s[i] = ta.n0 + r < a.rows ? __ldg(a.xs + (ta.n0 + r) * kblocks + kb) : 0.0f;
    }
    named_sync<kConsumers>();
    const int h = warp >> 2, w = warp & 3;
    const int R0 = 64 * h + 16 * w + g;
    // total: the chains' sum (S = 1) or, in a cluster, the first held chain; hold: the others.
    float total[4 * NJ], acc[4 * NJ], hold[kMaxHeld > 1 ? kMaxHeld - 1 : 1][4 * NJ];
#pragma unroll
    for (int i = 0; i < 4 * NJ; ++i) total[i] = acc[i] = 0.0f;
#pragma unroll
    for (int l = 0; l + 1 < kMaxHeld; ++l)
#pragma unroll
      for (int i = 0; i < 4 * NJ; ++i) hold[l][i] = 0.0f;
    int n = 0;
#pragma unroll 1
    for (int c = c0; c < c0 + held; ++c) {
#pragma unroll 1
      for (int kb = c; kb < kblocks; kb += kWarps, ++n) {
        const int s = n % kStages;
        uint8_t* st = sm + s * L::kStage;
        const uint8_t* xraw = st + kWBytes;
        // B tile n % 2 is free: every warp passed block n − 1's barrier after block n − 2's MMAs.
        uint8_t* xt = sm + L::kTiles + (n & 1) * L::kXF16;
        mbar_wait(full + s, uint32_t((n / kStages) & 1));
        // The block's activations into the f16 B tile: item (row p, chunk C) = logical pairs
        // 4C .. 4C + 3, pair i from physical k 32i + 4·(C / 2) + 2·(C % 2).
        for (int item = threadIdx.x; item < 16 * N; item += kConsumers) {
          const int p = item >> 4, C = item & 15;
          uint32_t o[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint32_t wd = *reinterpret_cast<const uint32_t*>(xraw + p * 128 + 32 * i + 4 * (C >> 1));
            o[i] = e4m3x2_to_f16x2(wd >> (16 * (C & 1)));
          }
          *reinterpret_cast<uint4*>(xt + sw128_chunk_offset(N, p, C)) = make_uint4(o[0], o[1], o[2], o[3]);
        }
        fence_proxy_async();
        named_sync<kConsumers>();
        // The warp's weight rows R0, R0 + 8: bytes 32t .. 32t + 31 (chunks 2t, 2t + 1, swizzled by row).
        uint32_t af[8][4];  // step k's A fragment: word k of both rows, f16 pairs (lower k, upper k)
        e4m3_box_fragments(st, R0, t, af, [](uint32_t v) { return e4m3x2_to_f16x2(v); });
        float part[4 * NJ] = {};
        wg_fence();
#pragma unroll
        for (int k = 0; k < 8; ++k)
          wgmma_rs<NJ, false>(part, af[k], sw128_desc(smem_addr(xt) + (k >> 2) * (N * 128) + (k & 3) * 32), k > 0);
        wg_commit();
        wg_wait0();
        // Every read of stage s is done (weights in registers, the B tile by the waited MMAs, the
        // codes before the barrier): release it to the producer.
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + s);
        const float sw = sw_s[kb];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int c2 = 0; c2 < 2; ++c2) {
            const float m = xs_s[kb * N + 8 * j + 2 * t + c2] * sw;
#pragma unroll
            for (int r = 0; r < 2; ++r) acc[4 * j + 2 * r + c2] = acc[4 * j + 2 * r + c2] + part[4 * j + 2 * r + c2] * m;
          }
      }
      // Chain c is done (a chain without blocks adds zeros, as the register kernel's idle warps do).
      if (S == 1 || c == c0) {
#pragma unroll
        for (int i = 0; i < 4 * NJ; ++i) total[i] = c == c0 ? acc[i] : total[i] + acc[i];
      } else {
#pragma unroll
        for (int l = 0; l + 1 < kMaxHeld; ++l)
          if (l + 1 == c - c0)
#pragma unroll
            for (int i = 0; i < 4 * NJ; ++i) hold[l][i] = acc[i];
      }
#pragma unroll
      for (int i = 0; i < 4 * NJ; ++i) acc[i] = 0.0f;
    }
    if (S == 1) {
      store_tile<NJ>(ta, a.rows, total, h, w, g, t);
    } else {
      // Park the held chains in the ring (every copy has landed and been read): chain l of output
      // o (0..127), row r at ((l·128 + o)·N + r).
      float* park = reinterpret_cast<float*>(sm);
      named_sync<kConsumers>();
#pragma unroll
      for (int l = 0; l < kMaxHeld; ++l)
        if (l < held)
#pragma unroll
          for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
              for (int c2 = 0; c2 < 2; ++c2)
                park[(l * kOut + 64 * h + 16 * w + g + 8 * r) * N + 8 * j + 2 * t + c2] =
                    l == 0 ? total[4 * j + 2 * r + c2] : hold[l > 0 ? l - 1 : 0][4 * j + 2 * r + c2];
    }
  }
  if (S == 1) return;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (threadIdx.x < kConsumers) {  // rank r adds outputs [r·128/S, +128/S) over the 8 chains in order
    const float* park = reinterpret_cast<const float*>(sm);
    const int per = kOut / S;
    for (int i = threadIdx.x; i < per * N; i += kConsumers) {
      const int o = rank * per + i / N, r = i % N;
      float x[kWarps];
#pragma unroll
      for (int c = 0; c < kWarps; ++c) x[c] = *cluster.map_shared_rank(park + ((c % held) * kOut + o) * N + r, c / held);
      float v = x[0];
#pragma unroll
      for (int c = 1; c < kWarps; ++c) v = v + x[c];
      const int64_t oo = ta.o0 + o, row = ta.n0 + r;
      if (oo < ta.o_end && row < a.rows) ta.y[row * ta.out + oo] = ta.round ? round_bf16(v) : v;
    }
  }
  cluster.sync();  // no CTA leaves while another reads its chains
}

// The cluster size: the fewest of 1, 2, 4, 8 CTAs per tile that give at least kMinCtas CTAs
// (and, when split, few enough chains per CTA for its registers).
constexpr int64_t kMinCtas = 120;
int cluster_for(int64_t tiles, int max_held) {
  int S = 1;
  while (S < 8 && tiles * S < kMinCtas) S *= 2;
  return S > 1 && S < kWarps / max_held ? kWarps / max_held : S;
}

// The call on row tiles of 8·NJ rows (see launch_stream_lin8).
template <int NJ>
bool launch(Args a, cudaStream_t s, bool any_shape) {
  using L = Layout<NJ>;
  if (a.in / 128 > L::kMaxKBlocks) return false;
  dim3 grid;
  if (!tiled_grid(a, kOut, L::kRows, grid)) return false;  // x: row tiles (1), y: output tiles
  const int S = cluster_for(int64_t(grid.x) * grid.y, L::kMaxHeld);
  if (S > 1 && !any_shape) return false;
  Maps maps{};
  if (!encode_map(&maps.x, a.x, a.rows, a.in, L::kRows, false) || !encode_weight_maps(a, a.in, maps.w)) return false;
  grid.x *= unsigned(S);
  launch_streamed<lin8_stream_kernel<NJ>>(grid, kThreads, L::kSmem, S, s, a, maps, S);  // a cluster only when split
  return true;
}

}  // namespace

bool launch_stream_lin8(const Args& a, cudaStream_t s, bool any_shape) {
  if (a.rows > kStreamMaxRows || a.x_row_div != 1 || (a.nseg == 0 && a.opg != a.out) || a.in % 128 != 0 ||
      !aligned16(a.x))
    return false;
  if (a.rows <= 8) return launch<1>(a, s, any_shape);
  if (a.rows <= 16) return launch<2>(a, s, any_shape);
  if (a.rows <= 32) return launch<4>(a, s, any_shape);
  return launch<8>(a, s, any_shape);
}

}  // namespace dsv4::gpu::mma::detail
