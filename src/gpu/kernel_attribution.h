// Attribution of CUPTI kernel records to our launcher names (pure CPU code, no CUDA calls).
//
// CUPTI reports each kernel execution with its (mangled) function name and start/end
// timestamps, also for kernels replayed from a CUDA graph. Our per-kernel tables are keyed by
// launcher names ("lin8", "decode_attention (CSA)") and carry each launcher's byte
// accounting, and several launchers share one kernel function (lin8 / lin8 (experts),
// the three attention variants, rope / rope (inverse)). The scheme:
//
//  1. One eager decode step runs with the profiler on and CUPTI tracing with external
//     correlation: every prof::Launch pushes its index in the launch log, so each kernel record
//     of that step names the launch (launcher, bytes) that issued it. build_kernel_map() turns
//     this into, per kernel function, the launchers of its 1st, 2nd, ... execution in one step
//     (in execution order), plus each launcher's bytes per step.
//  2. Graph replays are traced without correlation (a replayed kernel only correlates with
//     cudaGraphLaunch). attribute() walks their records in start-time order and gives the
//     i-th execution of function F the launcher of occurrence (i mod n_F) of F in the mapped
//     step. A decode graph is captured from one stream, so its kernels replay in launch order:
//     the same order as the eager step. A function with one launcher needs no order at all.
//     Functions with a different count per step than in the mapped step are counted in
//     `mismatched_functions` (their split between launchers is then approximate); functions
//     never seen in the mapped step are reported under their demangled name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpu/profiler.h"

namespace dsv4::gpu::prof {

// One kernel execution as CUPTI reported it.
struct KernelRecord {
  std::string name;  // kernel function name, mangled as CUPTI reports it
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t device = 0;
  uint32_t correlation = 0;
  uint64_t launch = 0;    // 1 + index in the launch log of the prof::Launch that issued it; 0: none
  uint32_t graph_id = 0;  // non-zero for kernels launched from a CUDA graph
  uint64_t graph_node = 0;
};

// One profiled launch (prof::Launch), in launch order.
struct LaunchEntry {
  std::string launcher;
  double bytes = 0;
};

struct KernelMap {
  // Per kernel function: the launcher of each of its executions in the mapped step, in
  // execution order ("" where no prof::Launch issued it).
  std::map<std::string, std::vector<std::string>> occurrences;
  std::map<std::string, double> bytes_per_step;      // per launcher
  std::map<std::string, int64_t> launches_per_step;  // per launcher
};

// The map from one step's records (any order) and the launch log of that step.
KernelMap build_kernel_map(std::vector<KernelRecord> step_records,
                           const std::vector<LaunchEntry>& launches);

struct Attribution {
  std::vector<KernelStat> rows;  // per launcher (or demangled function), sorted by time, descending
  int64_t records = 0;
  int64_t graph_records = 0;     // records with a graph id
  int mismatched_functions = 0;  // mapped functions whose count is not steps x their count per step
  int unmapped_functions = 0;    // functions absent from the map (rows under their demangled name)
};

// Rows for `steps` steps of records: calls = kernel executions, us = summed durations,
// bytes = the launcher's bytes per step x steps (0 for unmapped functions).
Attribution attribute(std::vector<KernelRecord> records, const KernelMap& map, int steps);

// How the ranks meet at a collective (tensor parallelism): the executions of the kernel
// functions whose name contains `name_part`, taken per device in start order and paired by index
// (call i of every device is the same collective). For each call, the last rank to arrive
// starts at max_d start_d; device d waited (max start − its start) and the call finished
// (end_d − max start) after the last arrival. A rank that always waits has a slower peer; equal
// waits on every rank mean the ranks take turns, and a large after-arrival time is the
// collective's own latency.
struct CollectiveDevice {
  uint32_t device = 0;
  int64_t calls = 0;              // paired calls (the smallest count over the devices)
  double mean_span_us = 0;        // mean end − start
  double mean_wait_us = 0;        // mean (last arrival − own start)
  double mean_after_last_us = 0;  // mean (own end − last arrival)
  double median_after_last_us = 0;
};
std::vector<CollectiveDevice> collective_sync(const std::vector<KernelRecord>& records, const std::string& name_part);

// "_ZN4dsv43gpu12_GLOBAL__N_111lin8_kernelEPKhi" -> "dsv4::gpu::lin8_kernel": demangled, without
// return type, parameter list and "(anonymous namespace)::"; the input when it does not demangle.
std::string short_kernel_name(const std::string& mangled);

}  // namespace dsv4::gpu::prof
