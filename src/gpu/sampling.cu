// Token sampling on the GPU: one thread-block cluster of C CTAs × 1024 threads per logits
// row (contract: sampling.h; C = cluster_size(rows)). Element i of a row belongs to thread
// (i mod 1024·C) of the cluster (CTA rank, thread), in every pass; cluster-wide values (max,
// totals, bucket weights, the gathered keys) meet through distributed shared memory and every
// CTA computes the same decisions from them.
//
// Every selection (top_k's k-th candidate, top_p's cut, the draw, the top logprobs) is one
// "crossing" search: walking the candidates in descending 64-bit key order (key = the ordered
// bits of the value above ~id, so ties go to the smaller id and all keys are distinct), find the
// first one whose cumulative weight (count or fixed-point mass) reaches T. The walk is never
// materialized: a radix descent histograms the weights of the keys under the current prefix into
// 256 buckets (8 key bits per pass over the row), picks the bucket where the running sum
// crosses T, and, once that bucket holds ≤ kCap keys, gathers them into shared memory, sorts them
// and finishes the walk there. Integer weights make every sum exact and independent of the
// atomics' order, so the result is deterministic.
#include <cooperative_groups.h>

#include <cfloat>
#include <mutex>

#include "base/check.h"
#include "gpu/cuda_check.h"
#include "gpu/sampling.h"

namespace dsv4::gpu {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kMaxCluster = 8;  // CTAs per row at small batch (fewer at large: cluster_size)
constexpr float kZScale = 1099511627776.0f;  // 2^40: Σ e^(l−max) in fixed point (exact, any order)
constexpr int kLevelBits = 8, kBuckets = 1 << kLevelBits;
// Each bucket has one counter per lane (32 copies, lane l adds to copy l): lanes of a warp never
// contend, so a flat row (most keys in a few buckets) costs no atomic serialization. Copy
// stride kBuckets + 1 spreads a bucket's copies over the banks.
constexpr int kCopies = 32, kCopyStride = kBuckets + 1;
constexpr int kCap = 2048;                   // keys gathered into shared memory to finish a search
constexpr float kMassScale = 4294967296.0f;  // 2^32: mass of p = round(p · 2^32)

struct Smem {
  // Mass per (lane copy, bucket) as two exact 32-bit halves (bits 16+ and bits 0..15 of each
  // weight ≤ 2^32; a copy sums ≤ 32 · 128 weights): 32-bit shared atomics only.
  unsigned int hist_hi[kCopies * kCopyStride];
  unsigned int hist_lo[kCopies * kCopyStride];
  unsigned int cnt[kCopies * kCopyStride];  // keys per (lane copy, bucket)
  unsigned long long bucket_w[kBuckets];    // this CTA's bucket totals (read by the cluster)
  unsigned int bucket_n[kBuckets];
  unsigned int total_n[kBuckets];  // the cluster's bucket counts
  unsigned long long gkey[kCap];   // this CTA's gathered keys (read by the cluster)
  unsigned long long gw[kCap];
  unsigned long long key[kCap];  // every CTA's gathered keys, merged (then sorted)
  unsigned long long w[kCap];
  unsigned long long xval;  // a CTA total shared with the cluster
  unsigned long long scan[32];
  unsigned int ncomp;
  int pick;
  unsigned long long pick_above, pick_key, pick_cum;
};

// The row as the sampler sees it (sampling.h): sanitized logits, max, temperature.
struct Row {
  const float* l;
  const SampleParams* p;
  float* prob;  // scratch row: p_i = float(exp(double(rel_i))) of every candidate (written once)
  int n;        // min(vocab, sample_vocab)
  float max;
  int first;   // this thread's first element: CTA rank · kThreads + threadIdx.x
  int stride;  // cluster CTAs · kThreads
};

__device__ __forceinline__ float load(const Row& r, int i) {
  float v = r.l[i];
  if (isnan(v)) v = -INFINITY;
  for (int b = 0; b < r.p->num_banned; ++b)
    if (r.p->banned[b] == i) v = -INFINITY;
  return v;
}

__device__ __forceinline__ uint32_t ordered(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// −0 and +0 compare equal (the host orders them by id), so −0 is keyed as +0.
__device__ __forceinline__ uint64_t make_key(float v, int i) {
  if (v == 0.0f) v = 0.0f;
  return (uint64_t(ordered(v)) << 32) | uint64_t(0xffffffffu - uint32_t(i));
}
__device__ __forceinline__ int key_id(uint64_t key) {
  return int(0xffffffffu - uint32_t(key));
}
__device__ __forceinline__ float key_value(uint64_t key) {
  const uint32_t o = uint32_t(key >> 32);
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

enum class Key { kRel, kLogit };  // sampling candidates / every id (top logprobs)
enum class Weight { kCount, kMass };

// Calls f(key, weight) for every key ≥ lo of the given kind (strided over the cluster).
template <Key K, Weight W, class F>
__device__ __forceinline__ void visit(const Row& r, uint64_t lo, F&& f) {
  for (int i = r.first; i < r.n; i += r.stride) {
    const float l = load(r, i);
    float v = l;
    if constexpr (K == Key::kRel) {
      const float rel = float(double(l - r.max) * r.p->inv_temperature);  // log(p_i / p_max)
      if (rel == -INFINITY || !(rel >= r.p->min_rel)) continue;
      v = rel;
    }
    const uint64_t key = make_key(v, i);
    if (key < lo) continue;
    unsigned long long w = 1;
    if constexpr (W == Weight::kMass) w = __float2ull_rn(r.prob[i] * kMassScale);
    f(key, w);
  }
}

// Exclusive scan of one value per thread in thread order; *total = the sum.
__device__ unsigned long long block_exclusive_scan(unsigned long long v,
                                                   Smem& sm,
                                                   unsigned long long* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned long long inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long t = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += t;
  }
  __syncthreads();
  if (lane == 31) sm.scan[warp] = inc;
  __syncthreads();
  unsigned long long before = 0, all = 0;
  for (int i = 0; i < kThreads / 32; ++i) {
    if (i < warp) before += sm.scan[i];
    all += sm.scan[i];
  }
  *total = all;
  return before + inc - v;
}

// Sorts sm.key/sm.w[0, m) by key, descending (bitonic over the next power of two; padding keys
// are 0, below every real key).
__device__ void sort_desc(Smem& sm, int m) {
  int p = 1;
  while (p < m) p <<= 1;
  for (int i = m + threadIdx.x; i < p; i += kThreads) sm.key[i] = 0, sm.w[i] = 0;
  __syncthreads();
  for (int k = 2; k <= p; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < p; i += kThreads) {
        const int partner = i ^ j;
        if (partner > i) {
          const bool desc = (i & k) == 0;
          const unsigned long long a = sm.key[i], b = sm.key[partner];
          if (desc ? a < b : a > b) {
            sm.key[i] = b, sm.key[partner] = a;
            const unsigned long long t = sm.w[i];
            sm.w[i] = sm.w[partner], sm.w[partner] = t;
          }
        }
      }
      __syncthreads();
    }
}

// Cluster-wide sum of one value per thread (integers: exact in any order); every thread gets it.
__device__ unsigned long long cluster_sum(unsigned long long v, Smem& sm, cg::cluster_group& cl) {
  unsigned long long cta;
  block_exclusive_scan(v, sm, &cta);
  if (threadIdx.x == 0) sm.xval = cta;
  cl.sync();
  unsigned long long all = 0;
  for (int q = 0; q < int(cl.num_blocks()); ++q) all += *cl.map_shared_rank(&sm.xval, q);
  cl.sync();  // every CTA has read xval before it is written again
  return all;
}
__device__ unsigned long long cluster_max(unsigned long long v, Smem& sm, cg::cluster_group& cl) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sm.scan[threadIdx.x >> 5] = v;
  __syncthreads();
  for (int i = 0; i < kThreads / 32; ++i) v = max(v, sm.scan[i]);
  if (threadIdx.x == 0) sm.xval = v;
  cl.sync();
  for (int q = 0; q < int(cl.num_blocks()); ++q) v = max(v, *cl.map_shared_rank(&sm.xval, q));
  cl.sync();
  return v;
}
// Gathers the cluster's keys ≥ lo whose top `done` bits equal `prefix` (done = 0: all; the caller
// guarantees ≤ kCap of them) into every CTA's sm.key / sm.w, sorted descending; returns the count.
template <Key K, Weight W>
__device__ int gather_sorted(
    const Row& r, uint64_t lo, uint64_t prefix, int done, Smem& sm, cg::cluster_group& cl) {
  if (threadIdx.x == 0) sm.ncomp = 0;
  __syncthreads();
  visit<K, W>(r, lo, [&](uint64_t key, unsigned long long w) {
    if (done > 0 && (done < 64 ? key >> (64 - done) : key) != prefix) return;
    const unsigned int slot = atomicAdd(&sm.ncomp, 1u);
    sm.gkey[slot] = key;
    sm.gw[slot] = w;
  });
  cl.sync();
  int m = 0;
  // Rank order (the sort makes the order irrelevant).
  for (int q = 0; q < int(cl.num_blocks()); ++q) {
    const int nq = int(*cl.map_shared_rank(&sm.ncomp, q));
    const unsigned long long* gk = cl.map_shared_rank(sm.gkey, q);
    const unsigned long long* gw = cl.map_shared_rank(sm.gw, q);
    for (int j = threadIdx.x; j < nq; j += kThreads) sm.key[m + j] = gk[j], sm.w[m + j] = gw[j];
    m += nq;
  }
  cl.sync();  // every CTA has copied before gkey / ncomp are reused
  sort_desc(sm, m);
  return m;
}

struct Crossing {
  uint64_t key;  // the first key (descending) whose cumulative weight reaches T
  uint64_t cum;  // cumulative weight through it
};

// The crossing over keys ≥ lo for T ≥ 1 ≤ their total weight (see the file comment). Every CTA
// of the cluster computes the same bucket totals and therefore the same picks.
template <Key K, Weight W>
__device__ Crossing
find_crossing(const Row& r, uint64_t lo, uint64_t T, Smem& sm, cg::cluster_group& cl) {
  uint64_t prefix = 0, above = 0;
  int done = 0;
  for (;;) {
    const int bits = min(kLevelBits, 64 - done), shift = 64 - done - bits, nb = 1 << bits;
    for (int i = threadIdx.x; i < kCopies * kCopyStride; i += kThreads)
      sm.hist_hi[i] = 0, sm.hist_lo[i] = 0, sm.cnt[i] = 0;
    __syncthreads();
    const int copy = (threadIdx.x & 31) * kCopyStride;
    visit<K, W>(r, lo, [&](uint64_t key, unsigned long long w) {
      if (done > 0 && (key >> (64 - done)) != prefix) return;
      const uint32_t b = uint32_t(key >> shift) & uint32_t(nb - 1);
      if constexpr (W == Weight::kMass) {  // counts: the weight is the count
        atomicAdd(&sm.hist_hi[copy + b], unsigned(w >> 16));
        atomicAdd(&sm.hist_lo[copy + b], unsigned(w & 0xffffu));
      }
      atomicAdd(&sm.cnt[copy + b], 1u);
    });
    __syncthreads();
    if (int(threadIdx.x) < nb) {  // this CTA's bucket totals over the lane copies
      const int b = int(threadIdx.x);
      unsigned long long sw = 0;
      unsigned int c = 0;
      for (int q = 0; q < kCopies; ++q) {
        const int i = q * kCopyStride + b;
        sw += (static_cast<unsigned long long>(sm.hist_hi[i]) << 16) + sm.hist_lo[i];
        c += sm.cnt[i];
      }
      sm.bucket_w[b] = sw;
      sm.bucket_n[b] = c;
    }
    cl.sync();
    // Thread t < nb owns descending position t (bucket nb − 1 − t): its cluster-wide weight.
    unsigned long long s = 0;
    if (int(threadIdx.x) < nb) {
      const int b = nb - 1 - int(threadIdx.x);
      unsigned int c = 0;
      for (int q = 0; q < int(cl.num_blocks()); ++q) {
        s += *cl.map_shared_rank(&sm.bucket_w[b], q);
        c += *cl.map_shared_rank(&sm.bucket_n[b], q);
      }
      sm.total_n[b] = c;
      if constexpr (W == Weight::kCount) s = c;
    }
    cl.sync();  // every CTA has read the bucket totals before the next level rewrites them
    unsigned long long total;
    const unsigned long long before = above + block_exclusive_scan(s, sm, &total);
    if (before < T && T <= before + s) {
      sm.pick = nb - 1 - int(threadIdx.x);
      sm.pick_above = before;
    }
    __syncthreads();
    const int b = sm.pick;
    above = sm.pick_above;
    prefix = done > 0 ? (prefix << bits) | uint64_t(b) : uint64_t(b);
    done += bits;
    const unsigned int count = sm.total_n[b];
    __syncthreads();
    if (count > unsigned(kCap)) continue;
    // Finish: gather the bucket's keys, sort them, walk them in order.
    const int m = gather_sorted<K, W>(r, lo, prefix, done, sm, cl);
    // ≤ 2 keys per thread: thread t owns sorted positions 2t, 2t+1.
    unsigned long long w0 = 2 * threadIdx.x < m ? sm.w[2 * threadIdx.x] : 0;
    unsigned long long w1 = 2 * threadIdx.x + 1 < m ? sm.w[2 * threadIdx.x + 1] : 0;
    const unsigned long long b0 = above + block_exclusive_scan(w0 + w1, sm, &total);
    if (2 * threadIdx.x < m && b0 < T && T <= b0 + w0) {
      sm.pick_key = sm.key[2 * threadIdx.x], sm.pick_cum = b0 + w0;
    } else if (2 * threadIdx.x + 1 < m && b0 + w0 < T && T <= b0 + w0 + w1) {
      sm.pick_key = sm.key[2 * threadIdx.x + 1], sm.pick_cum = b0 + w0 + w1;
    }
    __syncthreads();
    const Crossing c{sm.pick_key, sm.pick_cum};
    __syncthreads();
    return c;
  }
}

// Σ mass of the candidates with key ≥ lo.
__device__ uint64_t mass_total(const Row& r, uint64_t lo, Smem& sm, cg::cluster_group& cl) {
  unsigned long long s = 0;
  visit<Key::kRel, Weight::kMass>(r, lo, [&](uint64_t, unsigned long long w) { s += w; });
  return cluster_sum(s, sm, cl);
}

// Grid: rows × C CTAs, clusters of C along x (row = blockIdx.x / C).
__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits,
                                                          int64_t vocab,
                                                          const SampleParams* __restrict__ params,
                                                          SampleResult* __restrict__ results,
                                                          float* scratch) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  cg::cluster_group cl = cg::this_cluster();
  const int row = int(blockIdx.x) / int(cl.num_blocks());
  const bool lead = cl.block_rank() == 0;
  const SampleParams* p = params + row;
  if (!p->on_device) return;  // the whole cluster returns
  Row r{logits + int64_t(row) * vocab,
        p,
        scratch + int64_t(row) * vocab,
        int(vocab < int64_t(p->sample_vocab) ? vocab : int64_t(p->sample_vocab)),
        0.0f,
        int(cl.block_rank()) * kThreads + int(threadIdx.x),
        int(cl.num_blocks()) * kThreads};
  SampleResult* out = results + row;
  if (r.n <= 0) {
    if (lead && threadIdx.x == 0) out->token = -1;
    return;
  }

  // Max and argmax (ties: smaller id), as one max over the logit keys.
  unsigned long long best = 0;
  for (int i = r.first; i < r.n; i += r.stride)
    best = max(best, (unsigned long long)make_key(load(r, i), i));
  best = cluster_max(best, sm, cl);
  const int argmax = key_id(best);
  r.max = load(r, argmax);

  const bool want_lp = p->logprobs != 0;
  double log_z = 0.0;
  if (want_lp) {
    // Σ e^(l−max) with terms rounded to 2^-40: an exact integer sum, so the logprobs do not
    // depend on the cluster size (i.e. on the batch).
    unsigned long long z = 0;
    for (int i = r.first; i < r.n; i += r.stride)
      z += __float2ull_rn(expf(load(r, i) - r.max) * kZScale);
    log_z = log(double(cluster_sum(z, sm, cl)) / double(kZScale)) + double(r.max);
  }

  int token = argmax;
  if (!p->greedy && r.max != -INFINITY) {
    // The candidates' probabilities, once, by the host's formula (double exp rounded to fp32) so
    // that masses and hence draws agree with the host sampler's; their count and total mass.
    unsigned long long count = 0, mass_part = 0;
    visit<Key::kRel, Weight::kCount>(r, 0, [&](uint64_t key, unsigned long long) {
      const float prob = float(exp(double(key_value(key))));
      r.prob[key_id(key)] = prob;
      ++count;
      mass_part += __float2ull_rn(prob * kMassScale);
    });
    const unsigned long long total_count = cluster_sum(count, sm, cl);
    uint64_t lo = 0, mass = cluster_sum(mass_part, sm, cl);
    if (p->top_k > 0 && total_count > uint64_t(p->top_k)) {
      lo = find_crossing<Key::kRel, Weight::kCount>(r, 0, uint64_t(p->top_k), sm, cl).key;
      mass = mass_total(r, lo, sm, cl);
    }
    if (p->top_p < 1.0f) {
      const double t = ceil(double(p->top_p) * double(mass));
      const Crossing c =
          find_crossing<Key::kRel, Weight::kMass>(r, lo, uint64_t(max(t, 1.0)), sm, cl);
      lo = c.key;
      mass = c.cum;
    }
    const uint64_t t = min(mass, uint64_t(floor(p->u * double(mass))) + 1);
    token = key_id(find_crossing<Key::kRel, Weight::kMass>(r, lo, t, sm, cl).key);
  }

  int num_top = 0;
  if (want_lp && p->top_logprobs > 0) {
    num_top = min(min(p->top_logprobs, kSampleMaxTopLogprobs), r.n);
    const uint64_t cut =
        find_crossing<Key::kLogit, Weight::kCount>(r, 0, uint64_t(num_top), sm, cl).key;
    gather_sorted<Key::kLogit, Weight::kCount>(r, cut, 0, 0, sm, cl);
    if (lead && int(threadIdx.x) < num_top) {
      const int id = key_id(sm.key[threadIdx.x]);
      out->top_id[threadIdx.x] = id;
      out->top_logprob[threadIdx.x] = float(double(load(r, id)) - log_z);
    }
  }
  if (lead && threadIdx.x == 0) {
    out->token = token;
    out->logprob = want_lp ? float(double(load(r, token)) - log_z) : 0.0f;
    out->num_top = num_top;
  }
}

// CTAs per row: 8 up to 33 rows, then fewer so the grid stays about two waves of 132 SMs.
// Every token and logprob is exact integer arithmetic over the row's elements, so the cluster
// size changes nothing but the time.
int cluster_size(int64_t rows) {
  int c = kMaxCluster;
  while (c > 1 && rows * c > 264) c /= 2;
  return c;
}

}  // namespace

void sample_rows(const float* logits,
                 int64_t rows,
                 int64_t vocab,
                 const SampleParams* params,
                 SampleResult* results,
                 float* scratch,
                 cudaStream_t stream) {
  DSV4_CHECK(rows >= 0 && rows <= 65535, "sample_rows: ", rows, " rows (limit 65535)");
  DSV4_CHECK(vocab > 0 && vocab < (int64_t{1} << 31), "sample_rows: vocab ", vocab);
  if (rows == 0) return;
  static std::once_flag smem_set[kMaxDevices];
  call_once_per_device(smem_set, [] {
    CUDA_CHECK(cudaFuncSetAttribute(
        sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Smem))));
  });
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  const int cluster = cluster_size(rows);
  attr[0].val.clusterDim.x = unsigned(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(rows) * unsigned(cluster));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = sizeof(Smem);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, sample_kernel, logits, vocab, params, results, scratch));
}

}  // namespace dsv4::gpu
