#include "model/state_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/check.h"

namespace dsv4::model {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(bytes) / double(int64_t{1} << 30));
  return buf;
}

}  // namespace

std::string StatePlan::summary() const {
  char frac[16];
  std::snprintf(frac, sizeof(frac), "%.2f", mem_fraction_static);
  return str_cat("KV/state pool: ", max_sequences, " sequences × ", max_context, " positions (= ",
                 max_sequences * max_context, " tokens), ", gib(slot_bytes), " GiB per sequence slot, ",
                 gib(pool_bytes), " GiB total (", padding_slots, " padding slot", padding_slots == 1 ? "" : "s",
                 " included; limited by ", limited_by_memory ? "memory" : "--max-running-requests",
                 "); mem_fraction_static=", frac);
}

StatePlan plan_state_slots(const StatePlanInput& in) {
  DSV4_CHECK(in.mem_fraction_static > 0 && in.mem_fraction_static <= 1, "--mem-fraction-static must be in (0, 1], got ",
             in.mem_fraction_static);
  DSV4_CHECK(in.total_bytes > 0 && in.used_bytes >= 0 && in.reserve_bytes >= 0, "memory planner: bad device sizes (total ",
             in.total_bytes, ", used ", in.used_bytes, ", reserve ", in.reserve_bytes, ")");
  DSV4_CHECK(in.slot_bytes > 0, "memory planner: slot size must be positive, got ", in.slot_bytes);
  DSV4_CHECK(in.max_running_requests >= 1, "memory planner: --max-running-requests must be >= 1");
  DSV4_CHECK(in.padding_slots >= 0, "memory planner: padding slots must be >= 0");
  StatePlan p;
  p.max_context = in.max_context;
  p.slot_bytes = in.slot_bytes;
  p.padding_slots = in.padding_slots;
  p.mem_fraction_static = in.mem_fraction_static;
  const double allowed = std::floor(static_cast<double>(in.total_bytes) * in.mem_fraction_static);
  p.budget_bytes = std::max<int64_t>(0, static_cast<int64_t>(allowed) - in.used_bytes - in.reserve_bytes);
  const int64_t fit = p.budget_bytes / in.slot_bytes;
  const int64_t need = 1 + in.padding_slots;
  if (fit < need) {
    DSV4_FAIL("--mem-fraction-static=", in.mem_fraction_static, " leaves ", p.budget_bytes,
              " bytes for the KV/state pool (", in.total_bytes, " device bytes × ", in.mem_fraction_static, " − ",
              in.used_bytes, " in use (weights, context) − ", in.reserve_bytes,
              " reserved for activations/CUDA graphs), but one sequence slot of ", in.max_context,
              " positions needs ", in.slot_bytes, " bytes and ", need, " slots (", need * in.slot_bytes,
              " bytes) are the minimum; raise --mem-fraction-static or lower --context-length");
  }
  const int64_t want = in.max_running_requests + in.padding_slots;
  p.slots = std::min(want, fit);
  p.limited_by_memory = fit < want;
  p.max_sequences = p.slots - in.padding_slots;
  p.pool_bytes = p.slots * in.slot_bytes;
  return p;
}

}  // namespace dsv4::model
