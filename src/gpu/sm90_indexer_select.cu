// The indexer's top-k selection for sm_90a (the second kernel of indexer_topk,
// sm90_indexer_topk.h): from the scan's order-preserving 16-bit score keys and its per-CTA
// high-byte histograms, the top min(k, visible) ids of a row by (score desc, id asc) =
// cpu::select_topk, then −1 padding.
//
// Method (both kernels): sum the row's histogram slices (integer counts: any order, same
// totals); the bin b1 holding the k-th largest key (threshold_bin, a block scan over the 256
// bins); a histogram of the low bytes of the keys in b1, giving the exact threshold key T and
// the number `need` of ties at T to take; then every key > T and the `need` lowest-id keys at T;
// the ≤ 512 picks are ordered by the composite (key << 32 | ~id), descending.
//
// One-CTA kernel (rows of fewer keys): CTA r = row r, 1024 threads, thread i owning the i-th
// contiguous id range; each pass re-reads the row's keys from L2, picks are appended through a
// shared counter and ordered by rank_and_write (one barrier).
//
// Cluster kernel (rows of ≥ kSelectClusterMinKeys keys): a row's ids are split into C contiguous
// ranges over a cluster of C CTAs (C = 1..8, about kSelectKeysPerCta keys a CTA, at most
// SMs / rows), each of 1024 threads owning a contiguous id range (id order across threads and
// ranks) whose keys (up to 32) it keeps in registers: one read of the keys instead of three.
// Each rank sums a share of the histogram slices; those sums, the ranks' low-byte histograms and
// their counts of keys above / at T are exchanged through distributed shared memory. Every rank
// stores its picks straight into rank 0's list at positions given by those counts (keys above T
// first, ties after them in id order), and rank 0 orders (rank_and_write) and writes the row.
// Both give the same output (sm90_indexer_topk_test.cu; DSV4_INDEXER_SELECT_CLUSTER = 1 / 0
// forces either kernel).
#include <cooperative_groups.h>

#include <algorithm>

#include "base/env.h"
#include "gpu/cuda_check.h"
#include "gpu/device_math.cuh"
#include "gpu/pdl.cuh"
#include "gpu/sm90_indexer_select.cuh"

namespace dsv4::gpu::sm90 {
namespace {

namespace cg = cooperative_groups;

constexpr int kSelectThreads = 1024;
constexpr int kSelectMaxCluster = 8;     // portable cluster size
constexpr int kSelectKeysPerCta = 8192;  // the cluster kernel's target keys a CTA
constexpr int kCachedGroups = 4;         // 8-key groups a thread keeps in registers (32 keys)
// Rows of at least this many keys (128K tokens at ratio 4) take the cluster kernel
// (DSV4_INDEXER_SELECT_CLUSTER = 1 / 0 forces it / the one-CTA kernel): H100, 2026-12-07, scan +
// selection at B = 1: 8K 17.2 vs 13.8 µs, 128K 20.3 vs 22.5, 1M 50.6 vs 91.6
// (docs/attention-decode-rounds.md, indexer round 6).
constexpr int kSelectClusterMinKeys = 32768;

// Probe instantiation (kProbe): thread 0 stamps clock64 at the phase boundaries (slot i, ticks
// since the CTA's entry; sm90_indexer_topk.h lists them) and rank 0 writes its row's stamps.
template <bool kProbe>
__device__ __forceinline__ void select_mark(long long* stamps, int i, long long t0) {
  if constexpr (kProbe)
    if (threadIdx.x == 0) stamps[i] = clock64() - t0;
}

template <bool kProbe>
__device__ __forceinline__ void select_probe_write(const long long* stamps, long long* probe, int r) {
  if constexpr (kProbe)
    if (threadIdx.x == 0)
      for (int i = 0; i < kSelectProbeSlots; ++i) probe[int64_t(r) * kSelectProbeSlots + i] = stamps[i];
}

// The bin holding the K-th largest key: the largest b with above0 + Σ_{b' ≥ b} cnt[b'] ≥ K
// (else 0), and *s_above = above0 + Σ_{b' > b} cnt[b'] — what the serial descending scan
// `for (b = 255; b > 0 && above + cnt[b] < K; --b) above += cnt[b]` finds, computed by threads
// 0..255 with a block scan (one parallel read of the counts instead of a dependent chain).
// Every thread of the block calls it (barriers); above0 < K.
__device__ void threshold_bin(const uint32_t* cnt, int above0, int K, int* scan, int* s_bin,
                              int* s_above) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int b = 255 - tid;  // thread tid: bin 255 − tid (descending bins = ascending threads)
  int v = 0, incl = 0;
  if (tid < 256) {
    v = int(cnt[b]);
    incl = warp_inclusive_sum(v, lane);
    if (lane == 31) scan[warp] = incl;
  }
  __syncthreads();
  if (tid < 256) {
    for (int i = 0; i < warp; ++i) incl += scan[i];
    const int excl = incl - v;  // Σ bins > b
    const bool here = above0 + incl >= K, before = above0 + excl >= K;  // before: bin b+1's test
    if ((here && !before) || (b == 0 && !before)) {
      *s_bin = b;
      *s_above = above0 + excl;
    }
  }
  __syncthreads();
}

__device__ __forceinline__ uint64_t composite(uint16_t key, int id) {
  return (uint64_t(key) << 32) | uint64_t(0xffffffffu - uint32_t(id));
}

// The row's picks in order and its output (every thread of the CTA calls it; one barrier):
// sel [kIndexTopk] holds the `take` picks' composites (distinct, > 0) and zeros. Warp w < 16
// sorts sel[32w, 32w + 32) descending by a shuffle bitonic network and stores the run back;
// thread i < kIndexTopk then takes its element's output position — the count of greater
// composites, found in each of the 16 runs (its own included) by a binary search, four runs'
// searches interleaved — and writes its id there. topk_row [K]: positions ≥ take get −1.
// The loops stay rolled: this code runs once a CTA, and in the model its code is cold — fetching
// an unrolled body cost more than the loop overhead (H100, cold code: 8K rows 13.5 → 13.2 µs
// against the bitonic sort, 128K 20.7 → 20.6; docs/attention-decode-rounds.md, indexer round 7).
__device__ __forceinline__ void rank_and_write(uint64_t* sel, int K, int take, int32_t* topk_row) {
  constexpr int kRuns = kIndexTopk / 32;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint64_t v = 0;
  if (warp < kRuns) {
    v = sel[tid];
#pragma unroll 1
    for (int size = 2; size <= 32; size <<= 1)
#pragma unroll 1
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        const uint64_t o = __shfl_xor_sync(~0u, v, stride);
        const bool lower = (lane & stride) == 0, desc = (lane & size) == 0;  // size 32: all desc
        v = lower == desc ? (v > o ? v : o) : (v < o ? v : o);
      }
    sel[tid] = v;
  }
  __syncthreads();
  if (warp < kRuns && v != 0) {
    int pos = 0;
#pragma unroll 1
    for (int j0 = 0; j0 < kRuns; j0 += 4) {
      int c[4];  // c[u] = #{i : run[i] > v} in run j0 + u (descending; v itself is not > v)
#pragma unroll
      for (int u = 0; u < 4; ++u) c[u] = sel[32 * (j0 + u) + 31] > v ? 32 : 0;
#pragma unroll
      for (int step = 16; step > 0; step >>= 1)
#pragma unroll
        for (int u = 0; u < 4; ++u)
          if (c[u] < 32 && sel[32 * (j0 + u) + c[u] + step - 1] > v) c[u] += step;
      pos += (c[0] + c[1]) + (c[2] + c[3]);
    }
    topk_row[pos] = int32_t(0xffffffffu - uint32_t(v & 0xffffffffu));
  }
  for (int i = take + tid; i < K; i += blockDim.x) topk_row[i] = -1;
}

// fn(id, key) for the keys of ids [c0, c1) in id order, read from L2 (16-byte loads; c0 a
// multiple of 8).
template <typename Fn>
__device__ __forceinline__ void for_keys_l2(const uint16_t* keys, int c0, int c1, Fn&& fn) {
  int w = c0;
#pragma unroll 4
  for (; w + 8 <= c1; w += 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(keys + w);
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) fn(w + i, int((u[i >> 1] >> (16 * (i & 1))) & 0xffffu));
  }
  for (; w < c1; ++w) fn(w, int(keys[w]));
}

// The one-CTA kernel: CTA r = row r. (40 registers, no spills in either instantiation; with no
// minimum of one CTA an SM ptxas picked 32 and the probe instantiation spilled 16 bytes.)
template <bool kProbe>
__global__ void __launch_bounds__(kSelectThreads, 1)
    select_kernel(const __grid_constant__ IndexerArgs a, const uint16_t* __restrict__ keys_in,
                  const uint32_t* __restrict__ hist_in, int slices, long long* probe) {
  __shared__ long long stamps[kProbe ? kSelectProbeSlots : 1];
  const long long t0 = kProbe ? clock64() : 0;
  __shared__ uint64_t sel[kIndexTopk];
  __shared__ uint32_t hist1[256], hist2[256];
  __shared__ int warp_tot[kSelectThreads / 32];
  __shared__ int s_nsel, s_thresh, s_need;
  pdl_wait();  // the score kernel's keys and histogram
  pdl_trigger();
  select_mark<kProbe>(stamps, 0, t0);
  const int r = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int visible = row_visible(a, r), K = a.k;
  const uint16_t* keys = keys_in + int64_t(r) * indexer_score_stride(a.max_visible);
  const int take = visible < K ? visible : K;
  for (int i = tid; i < kIndexTopk; i += kSelectThreads) sel[i] = 0;
  if (tid < 256) {
    hist2[tid] = 0;
    uint32_t n = 0;  // the row's score CTAs' slices (bin tid)
    for (int sl = 0; sl < slices; ++sl) n += hist_in[(int64_t(r) * slices + sl) * 256 + tid];
    hist1[tid] = n;
  }
  if (tid == 0) s_nsel = 0;
  __syncthreads();
  select_mark<kProbe>(stamps, 1, t0);
  if (visible <= K) {
    for (int w = tid; w < visible; w += kSelectThreads) sel[w] = composite(keys[w], w);
  } else {
    // Threshold bin of the high byte, then of the low byte inside it.
    __shared__ int s_b1, s_above, scan[8];
    threshold_bin(hist1, 0, K, scan, &s_b1, &s_above);
    select_mark<kProbe>(stamps, 2, t0);
    const int b1 = s_b1;
    // Thread tid owns ids [c0, c1) (multiples of 8: 16-byte loads, id order across threads).
    const int per = (visible + 8 * kSelectThreads - 1) / (8 * kSelectThreads) * 8;
    const int c0 = min(visible, tid * per), c1 = min(visible, c0 + per);
    auto for_keys = [&](auto&& fn) { for_keys_l2(keys, c0, c1, fn); };
    for_keys([&](int, int k) {
      if ((k >> 8) == b1) atomicAdd(&hist2[k & 255], 1u);
    });
    __syncthreads();
    select_mark<kProbe>(stamps, 3, t0);
    __shared__ int s_b2, s_above2;
    threshold_bin(hist2, s_above, K, scan, &s_b2, &s_above2);
    if (tid == 0) {
      s_thresh = (b1 << 8) | s_b2;
      s_need = K - s_above2;  // ties at the threshold to take, lowest ids first
    }
    __syncthreads();
    select_mark<kProbe>(stamps, 4, t0);
    const int thresh = s_thresh, need = s_need;
    int my_ties = 0;
    for_keys([&](int w, int k) {
      if (k > thresh) sel[atomicAdd(&s_nsel, 1)] = composite(uint16_t(k), w);
      my_ties += k == thresh;
    });
    // Exclusive prefix of tie counts over threads (= id order).
    const int incl = warp_inclusive_sum(my_ties, lane);
    if (lane == 31) warp_tot[warp] = incl;
    __syncthreads();
    select_mark<kProbe>(stamps, 5, t0);
    int rank = incl - my_ties;
    for (int i = 0; i < warp; ++i) rank += warp_tot[i];
    if (rank < need && my_ties > 0)
      for_keys([&](int w, int k) {
        if (k == thresh && rank < need) {
          sel[atomicAdd(&s_nsel, 1)] = composite(uint16_t(k), w);
          ++rank;
        }
      });
  }
  __syncthreads();
  select_mark<kProbe>(stamps, 6, t0);
  rank_and_write(sel, K, take, a.topk + int64_t(r) * K);
  select_mark<kProbe>(stamps, 7, t0);
  if (tid == 0) a.count[r] = take;
  select_mark<kProbe>(stamps, 8, t0);
  select_probe_write<kProbe>(stamps, probe, r);
}


// The cluster kernel: cluster r = row r, rank c of C owns ids [c·span, (c+1)·span) of the row.
template <bool kProbe>
__global__ void __launch_bounds__(kSelectThreads, 1)
    select_cluster_kernel(const __grid_constant__ IndexerArgs a, const uint16_t* __restrict__ keys_in,
                          const uint32_t* __restrict__ hist_in, int slices, long long* probe) {
  const cg::cluster_group cluster = cg::this_cluster();
  const int C = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  __shared__ long long stamps[kProbe ? kSelectProbeSlots : 1];
  const long long t0 = kProbe ? clock64() : 0;
  __shared__ uint64_t sel[kIndexTopk];  // rank 0: the row's picks
  __shared__ uint32_t part[4][256];     // slice sums, a quarter of the slices each
  __shared__ uint32_t hist1_rank[256], hist1[256], hist2[256], hist2_all[256];
  __shared__ int warp_tot[2][kSelectThreads / 32];
  __shared__ int s_counts[2];  // this rank's keys above T and at T (read by the later ranks)
  __shared__ int s_b1, s_above, s_b2, s_above2, scan[8];
  pdl_wait();  // the score kernel's keys and histogram
  pdl_trigger();
  select_mark<kProbe>(stamps, 0, t0);
  const int r = int(blockIdx.x) / C, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int visible = row_visible(a, r), K = a.k, take = visible < K ? visible : K;
  const uint16_t* keys = keys_in + int64_t(r) * indexer_score_stride(a.max_visible);
  if (rank == 0)
    for (int i = tid; i < kIndexTopk; i += kSelectThreads) sel[i] = 0;
  if (visible <= K) {
    if (rank == 0)
      for (int w = tid; w < visible; w += kSelectThreads) sel[w] = composite(keys[w], w);
  } else {
    // This rank's ids [lo, hi) and this thread's [c0, c1) (multiples of 8 but at the row's end).
    const int span = (visible + 8 * C - 1) / (8 * C) * 8;
    const int lo = min(visible, rank * span), hi = min(visible, lo + span);
    const int per = (hi - lo + 8 * kSelectThreads - 1) / (8 * kSelectThreads) * 8;
    const int c0 = min(hi, lo + tid * per), c1 = min(hi, c0 + per);
    // Up to 32 keys in registers (the last group may read past `visible`, inside the row's
    // stride; those keys are never used), loaded first so that they fly during the histogram.
    const bool cached = per <= 8 * kCachedGroups;
    uint4 cache[kCachedGroups];
#pragma unroll
    for (int i = 0; i < kCachedGroups; ++i)
      cache[i] = cached && c0 + 8 * i < c1 ? *reinterpret_cast<const uint4*>(keys + c0 + 8 * i) : make_uint4(0, 0, 0, 0);
    {  // the row's high-byte histogram: rank c, thread t sums bin t % 256 of slices
       // c + C·(t / 256 + 4j); the ranks' sums are then added through DSMEM
      const int bin = tid & 255, q = tid >> 8;
      uint32_t n = 0;
#pragma unroll 4
      for (int sl = rank + C * q; sl < slices; sl += 4 * C) n += hist_in[(int64_t(r) * slices + sl) * 256 + bin];
      part[q][bin] = n;
    }
    if (tid < 256) hist2[tid] = 0;
    __syncthreads();
    if (tid < 256) hist1_rank[tid] = part[0][tid] + part[1][tid] + part[2][tid] + part[3][tid];
    cluster.sync();  // every rank's share of the slices
    if (tid < 256) {
      uint32_t n = 0;
      for (int q = 0; q < C; ++q) n += cluster.map_shared_rank(hist1_rank, q)[tid];
      hist1[tid] = n;
    }
    __syncthreads();
    select_mark<kProbe>(stamps, 1, t0);
    threshold_bin(hist1, 0, K, scan, &s_b1, &s_above);
    select_mark<kProbe>(stamps, 2, t0);
    const int b1 = s_b1;
    auto for_keys = [&](auto&& fn) {  // fn(id, key) over [c0, c1) in id order
      if (cached) {  // only the groups this thread holds (a short row's threads hold one or none)
#pragma unroll
        for (int g = 0; g < kCachedGroups; ++g) {
          if (c0 + 8 * g >= c1) break;
          const uint32_t u[4] = {cache[g].x, cache[g].y, cache[g].z, cache[g].w};
#pragma unroll
          for (int i = 0; i < 8; ++i)
            if (c0 + 8 * g + i < c1) fn(c0 + 8 * g + i, int((u[i >> 1] >> (16 * (i & 1))) & 0xffffu));
        }
      } else {
        for_keys_l2(keys, c0, c1, fn);
      }
    };
    for_keys([&](int, int k) {
      if ((k >> 8) == b1) atomicAdd(&hist2[k & 255], 1u);
    });
    cluster.sync();  // every rank's low-byte histogram
    select_mark<kProbe>(stamps, 3, t0);
    if (tid < 256) {
      uint32_t n = 0;
      for (int q = 0; q < C; ++q) n += cluster.map_shared_rank(hist2, q)[tid];
      hist2_all[tid] = n;
    }
    __syncthreads();
    threshold_bin(hist2_all, s_above, K, scan, &s_b2, &s_above2);
    const int thresh = (b1 << 8) | s_b2, need = K - s_above2, above_all = s_above2;
    select_mark<kProbe>(stamps, 4, t0);
    // Keys above T and at T before this thread's range: a block scan, then the earlier ranks'.
    int my_above = 0, my_ties = 0;
    for_keys([&](int, int k) {
      my_above += k > thresh;
      my_ties += k == thresh;
    });
    const int ia = warp_inclusive_sum(my_above, lane), it = warp_inclusive_sum(my_ties, lane);
    if (lane == 31) {
      warp_tot[0][warp] = ia;
      warp_tot[1][warp] = it;
    }
    __syncthreads();
    int pa = ia - my_above, pt = it - my_ties;
    for (int i = 0; i < warp; ++i) {
      pa += warp_tot[0][i];
      pt += warp_tot[1][i];
    }
    if (tid == kSelectThreads - 1) {
      s_counts[0] = pa + my_above;
      s_counts[1] = pt + my_ties;
    }
    cluster.sync();  // every rank's counts
    select_mark<kProbe>(stamps, 5, t0);
    for (int q = 0; q < rank; ++q) {
      const int* cq = cluster.map_shared_rank(s_counts, q);
      pa += cq[0];
      pt += cq[1];
    }
    uint64_t* dst = cluster.map_shared_rank(sel, 0);  // keys above T at [0, above_all), ties after
    if (my_above > 0 || (my_ties > 0 && pt < need))
      for_keys([&](int w, int k) {
        if (k > thresh) {
          dst[pa++] = composite(uint16_t(k), w);
        } else if (k == thresh && pt < need) {
          dst[above_all + pt++] = composite(uint16_t(k), w);
        }
      });
  }
  cluster.sync();  // rank 0's list is whole; no rank touches another's shared memory after this
  select_mark<kProbe>(stamps, 6, t0);
  if (rank != 0) return;
  rank_and_write(sel, K, take, a.topk + int64_t(r) * K);
  select_mark<kProbe>(stamps, 7, t0);
  if (tid == 0) a.count[r] = take;
  select_mark<kProbe>(stamps, 8, t0);
  select_probe_write<kProbe>(stamps, probe, r);
}

// Cluster size for `rows` rows of at most `max_visible` keys: ~kSelectKeysPerCta keys a CTA,
// 1..8, at most SMs / rows.
int select_cluster(int rows, int max_visible) {
  const int c = std::min((max_visible + kSelectKeysPerCta - 1) / kSelectKeysPerCta, kSelectMaxCluster);
  return std::max(1, std::min(c, device_sm_count() / rows));
}

template <bool kProbe>
void launch_select_as(const IndexerArgs& a, const uint16_t* keys, const uint32_t* hist, int slices,
                      long long* probe, cudaStream_t stream) {
  static const int forced = env_int("DSV4_INDEXER_SELECT_CLUSTER", -1);
  const bool cluster = forced == -1 ? a.max_visible >= kSelectClusterMinKeys : forced == 1;
  if (!cluster) {
    launch_pdl(select_kernel<kProbe>, dim3(unsigned(a.rows)), dim3(kSelectThreads), 0, stream, a, keys, hist,
               slices, probe);
    return;
  }
  const int C = select_cluster(a.rows, a.max_visible);
  cudaLaunchAttribute attr[2];
  // The cluster attribute also for C = 1 (cluster_pdl_attrs leaves it out there): the kernel's
  // cluster.sync() and DSMEM then act on a declared one-CTA cluster.
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(C);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(a.rows) * unsigned(C));
  cfg.blockDim = dim3(kSelectThreads);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 2 : 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, select_cluster_kernel<kProbe>, a, keys, hist, slices, probe));
}

}  // namespace

void launch_indexer_select(const IndexerArgs& a, const uint16_t* keys, const uint32_t* hist, int slices,
                           long long* probe, cudaStream_t stream) {
  if (probe != nullptr) launch_select_as<true>(a, keys, hist, slices, probe, stream);
  else launch_select_as<false>(a, keys, hist, slices, probe, stream);
}

}  // namespace dsv4::gpu::sm90
