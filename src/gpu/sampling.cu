// Token sampling on the GPU: one CTA of 1024 threads per logits row (contract: sampling.h).
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
#include <cfloat>
#include <mutex>

#include "base/check.h"
#include "gpu/cuda_check.h"
#include "gpu/sampling.h"

namespace dsv4::gpu {
namespace {

constexpr int kThreads = 1024;
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
  unsigned int cnt[kCopies * kCopyStride];         // keys per (lane copy, bucket)
  unsigned int bucket_cnt[kBuckets];
  unsigned long long key[kCap];
  unsigned long long w[kCap];
  unsigned long long scan[32];
  double dred[32];
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

// Calls f(key, weight) for every key ≥ lo of the given kind (strided over the CTA).
template <Key K, Weight W, class F>
__device__ __forceinline__ void visit(const Row& r, uint64_t lo, F&& f) {
  for (int i = threadIdx.x; i < r.n; i += kThreads) {
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

__device__ double block_sum_double(double v, Smem& sm) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sm.dred[threadIdx.x >> 5] = v;
  __syncthreads();
  double t = 0.0;
  for (int i = 0; i < kThreads / 32; ++i) t += sm.dred[i];
  return t;
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

struct Crossing {
  uint64_t key;  // the first key (descending) whose cumulative weight reaches T
  uint64_t cum;  // cumulative weight through it
};

// The crossing over keys ≥ lo for T ≥ 1 ≤ their total weight (see the file comment).
template <Key K, Weight W>
__device__ Crossing find_crossing(const Row& r, uint64_t lo, uint64_t T, Smem& sm) {
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
      if constexpr (W == Weight::kMass) {  // counts: the weight is cnt
        atomicAdd(&sm.hist_hi[copy + b], unsigned(w >> 16));
        atomicAdd(&sm.hist_lo[copy + b], unsigned(w & 0xffffu));
      }
      atomicAdd(&sm.cnt[copy + b], 1u);
    });
    __syncthreads();
    // Thread t < nb owns descending position t (bucket nb − 1 − t): its weight over the copies.
    unsigned long long s = 0;
    if (int(threadIdx.x) < nb) {
      const int b = nb - 1 - int(threadIdx.x);
      unsigned int c = 0;
      for (int q = 0; q < kCopies; ++q) {
        const int i = q * kCopyStride + b;
        s += (static_cast<unsigned long long>(sm.hist_hi[i]) << 16) + sm.hist_lo[i];
        c += sm.cnt[i];
      }
      sm.bucket_cnt[b] = c;
      if constexpr (W == Weight::kCount) s = c;
    }
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
    const unsigned int count = sm.bucket_cnt[b];
    __syncthreads();
    if (count > unsigned(kCap)) continue;
    // Finish: gather the bucket's keys, sort them, walk them in order.
    if (threadIdx.x == 0) sm.ncomp = 0;
    __syncthreads();
    visit<K, W>(r, lo, [&](uint64_t key, unsigned long long w) {
      if ((done < 64 ? key >> (64 - done) : key) != prefix) return;
      const unsigned int slot = atomicAdd(&sm.ncomp, 1u);
      sm.key[slot] = key;
      sm.w[slot] = w;
    });
    __syncthreads();
    const int m = int(sm.ncomp);
    sort_desc(sm, m);
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
__device__ uint64_t mass_total(const Row& r, uint64_t lo, Smem& sm) {
  unsigned long long s = 0;
  visit<Key::kRel, Weight::kMass>(r, lo, [&](uint64_t, unsigned long long w) { s += w; });
  unsigned long long total;
  block_exclusive_scan(s, sm, &total);
  return total;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits,
                                                          int64_t vocab,
                                                          const SampleParams* __restrict__ params,
                                                          SampleResult* __restrict__ results,
                                                          float* scratch) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const SampleParams* p = params + blockIdx.x;
  if (!p->on_device) return;
  Row r{logits + int64_t(blockIdx.x) * vocab,
        p,
        scratch + int64_t(blockIdx.x) * vocab,
        int(vocab < int64_t(p->sample_vocab) ? vocab : int64_t(p->sample_vocab)),
        0.0f};
  if (r.n <= 0) {
    if (threadIdx.x == 0) results[blockIdx.x].token = -1;
    return;
  }

  // Max and argmax (ties: smaller id), as one max over the logit keys.
  unsigned long long best = 0;
  for (int i = threadIdx.x; i < r.n; i += kThreads)
    best = max(best, (unsigned long long)make_key(load(r, i), i));
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  if ((threadIdx.x & 31) == 0) sm.scan[threadIdx.x >> 5] = best;
  __syncthreads();
  for (int i = 0; i < kThreads / 32; ++i) best = max(best, sm.scan[i]);
  __syncthreads();
  const int argmax = key_id(best);
  r.max = load(r, argmax);

  const bool want_lp = p->logprobs != 0;
  double log_z = 0.0;
  if (want_lp) {
    double z = 0.0;
    for (int i = threadIdx.x; i < r.n; i += kThreads) z += double(expf(load(r, i) - r.max));
    log_z = log(block_sum_double(z, sm)) + double(r.max);
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
    unsigned long long total_count, mass_all;
    block_exclusive_scan(count, sm, &total_count);
    block_exclusive_scan(mass_part, sm, &mass_all);
    uint64_t lo = 0, mass = mass_all;
    if (p->top_k > 0 && total_count > uint64_t(p->top_k)) {
      lo = find_crossing<Key::kRel, Weight::kCount>(r, 0, uint64_t(p->top_k), sm).key;
      mass = mass_total(r, lo, sm);
    }
    if (p->top_p < 1.0f) {
      const double t = ceil(double(p->top_p) * double(mass));
      const Crossing c = find_crossing<Key::kRel, Weight::kMass>(r, lo, uint64_t(max(t, 1.0)), sm);
      lo = c.key;
      mass = c.cum;
    }
    const uint64_t t = min(mass, uint64_t(floor(p->u * double(mass))) + 1);
    token = key_id(find_crossing<Key::kRel, Weight::kMass>(r, lo, t, sm).key);
  }

  SampleResult* out = results + blockIdx.x;
  int num_top = 0;
  if (want_lp && p->top_logprobs > 0) {
    num_top = min(min(p->top_logprobs, kSampleMaxTopLogprobs), r.n);
    const uint64_t cut =
        find_crossing<Key::kLogit, Weight::kCount>(r, 0, uint64_t(num_top), sm).key;
    if (threadIdx.x == 0) sm.ncomp = 0;
    __syncthreads();
    visit<Key::kLogit, Weight::kCount>(r, cut, [&](uint64_t key, unsigned long long) {
      const unsigned int slot = atomicAdd(&sm.ncomp, 1u);
      sm.key[slot] = key;
    });
    __syncthreads();
    sort_desc(sm, num_top);
    if (threadIdx.x < num_top) {
      const int id = key_id(sm.key[threadIdx.x]);
      out->top_id[threadIdx.x] = id;
      out->top_logprob[threadIdx.x] = float(double(load(r, id)) - log_z);
    }
  }
  if (threadIdx.x == 0) {
    out->token = token;
    out->logprob = want_lp ? float(double(load(r, token)) - log_z) : 0.0f;
    out->num_top = num_top;
  }
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
  sample_kernel<<<unsigned(rows), kThreads, sizeof(Smem), stream>>>(
      logits, vocab, params, results, scratch);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::gpu
