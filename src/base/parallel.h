// parallel_for: splits [0, n) into contiguous chunks run on a small persistent thread pool.
//
// The CPU reference uses it for row-parallel linears and per-head attention. Work items
// must be independent; results must not depend on the number of threads (each index is
// computed by exactly one thread with a fixed, index-local reduction order).
// Thread-safe: concurrent callers are serialized.
#pragma once

#include <cstdint>
#include <functional>

namespace dsv4 {

// Number of worker threads (including the caller). Set by DSV4_NUM_THREADS, default
// std::thread::hardware_concurrency().
int num_threads();

// Calls fn(begin, end) on disjoint chunks covering [0, n). Runs inline when n < min_chunk*2.
// If fn throws in any chunk, the other chunks still finish and the first exception is
// rethrown in the caller.
void parallel_for(int64_t n,
                  const std::function<void(int64_t, int64_t)>& fn,
                  int64_t min_chunk = 1);

}  // namespace dsv4
