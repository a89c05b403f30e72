// plan_state_slots: how many fixed per-sequence state slots fit on the device (the memory
// planner behind `--mem-fraction-static`, SGLang's meaning).
//
// Every sequence's device state (window rings, compressed KV, indexer keys, compressor
// states of every layer, MTP blocks included) is sized for the max context, so the pool is
// N equal slots. The planner runs after the weights are on the device:
//
//   budget = total_bytes × mem_fraction_static − used_bytes − reserve_bytes
//   slots  = min(max_running_requests + padding_slots, budget / slot_bytes)
//
// used_bytes is what the device already holds (weights, rope tables, CUDA context, other
// processes): total − free from cudaMemGetInfo. reserve_bytes is headroom for what is not
// allocated yet when the planner runs (the forward workspace grows on the first chunked
// prefill; CUDA graph pools). The (1 − fraction) share stays free as well, as in SGLang.
// padding_slots (1 for CUDA graphs: padded batch rows write there) are not for sequences.
// Pure function: no CUDA, unit-tested with made-up numbers.
#pragma once

#include <cstdint>
#include <string>

namespace dsv4::model {

// Default headroom for activations and CUDA graphs (bytes): the forward workspace of a
// 2048-token chunked-prefill step of DeepSeek-V4-Flash is well under this.
inline constexpr int64_t kDefaultActivationReserveBytes = int64_t{2} << 30;

struct StatePlanInput {
  int64_t total_bytes = 0;        // device memory (cudaMemGetInfo total)
  int64_t used_bytes = 0;         // already in use (total − free)
  double mem_fraction_static = 0.88;  // (0, 1]
  int64_t reserve_bytes = kDefaultActivationReserveBytes;
  int64_t slot_bytes = 0;         // device bytes of one sequence slot (> 0)
  int64_t max_running_requests = 1;  // >= 1
  int64_t padding_slots = 1;      // >= 0, allocated beyond the sequence slots
  int64_t max_context = 0;        // positions per slot (for the log line only)
};

struct StatePlan {
  int64_t budget_bytes = 0;   // what the fraction leaves for the pool
  int64_t slots = 0;          // slots to allocate (sequences + padding)
  int64_t max_sequences = 0;  // slots − padding_slots: concurrent sequences (>= 1)
  int64_t pool_bytes = 0;     // slots × slot_bytes
  bool limited_by_memory = false;  // true when memory, not max_running_requests, set slots
  // "KV/state pool: N sequences × L positions (= T tokens), X GiB per sequence slot, Y GiB
  // total; mem_fraction_static=F" (plus the padding slot and what limited N).
  std::string summary() const;
  int64_t max_context = 0;
  int64_t slot_bytes = 0;
  int64_t padding_slots = 0;
  double mem_fraction_static = 0;
};

// Throws dsv4::Error, naming --mem-fraction-static and the bytes needed and available, when
// not even one sequence slot (plus the padding slots) fits; or on invalid input.
StatePlan plan_state_slots(const StatePlanInput& in);

}  // namespace dsv4::model
