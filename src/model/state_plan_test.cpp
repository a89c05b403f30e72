// The device memory planner (state_plan.h) with made-up device sizes.
#include "model/state_plan.h"

#include <gtest/gtest.h>

#include <string>

#include "base/check.h"

namespace dsv4::model {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

StatePlanInput h200_like() {
  StatePlanInput in;
  in.total_bytes = 140 * kGiB;
  in.used_bytes = 80 * kGiB;  // weights + context
  in.mem_fraction_static = 0.88;
  in.reserve_bytes = 2 * kGiB;
  in.slot_bytes = kGiB / 2;
  in.max_running_requests = 64;
  in.padding_slots = 1;
  in.max_context = 65536;
  return in;
}

TEST(StatePlan, MemoryLimitsTheSlots) {
  const StatePlan p = plan_state_slots(h200_like());
  // 140 × 0.88 = 123.2 GiB − 80 − 2 = 41.2 GiB → 82 half-GiB slots, capped by 64 + 1.
  EXPECT_EQ(p.slots, 65);
  EXPECT_EQ(p.max_sequences, 64);
  EXPECT_FALSE(p.limited_by_memory);
  StatePlanInput in = h200_like();
  in.slot_bytes = 2 * kGiB;  // 41.2 / 2 → 20 slots
  const StatePlan q = plan_state_slots(in);
  EXPECT_EQ(q.slots, 20);
  EXPECT_EQ(q.max_sequences, 19);
  EXPECT_TRUE(q.limited_by_memory);
  EXPECT_EQ(q.pool_bytes, 40 * kGiB);
  EXPECT_LE(q.pool_bytes, q.budget_bytes);
}

TEST(StatePlan, BudgetFollowsTheFraction) {
  StatePlanInput in = h200_like();
  in.slot_bytes = 1;  // count bytes
  in.max_running_requests = int64_t{1} << 50;
  in.padding_slots = 0;
  const StatePlan p = plan_state_slots(in);
  const int64_t expect = static_cast<int64_t>(140.0 * 0.88 * kGiB) - 80 * kGiB - 2 * kGiB;
  EXPECT_EQ(p.budget_bytes, expect);
  EXPECT_EQ(p.slots, expect);
}

TEST(StatePlan, SummaryNamesCapacityAndFraction) {
  const StatePlan p = plan_state_slots(h200_like());
  const std::string s = p.summary();
  EXPECT_NE(s.find("KV/state pool: 64 sequences × 65536 positions (= 4194304 tokens)"), std::string::npos) << s;
  EXPECT_NE(s.find("0.500 GiB per sequence slot, 32.500 GiB total"), std::string::npos) << s;
  EXPECT_NE(s.find("mem_fraction_static=0.88"), std::string::npos) << s;
}

TEST(StatePlan, RefusesWhenNotOneSlotFits) {
  StatePlanInput in = h200_like();
  in.mem_fraction_static = 0.5;  // 70 GiB < 80 GiB in use
  try {
    plan_state_slots(in);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--mem-fraction-static"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(in.slot_bytes)), std::string::npos) << m;  // bytes needed
    EXPECT_NE(m.find(" leaves 0 bytes"), std::string::npos) << m;             // bytes available
  }
  // Exactly one sequence + the padding slot fits; one byte less does not.
  in = h200_like();
  in.used_bytes = 0;
  in.reserve_bytes = 0;
  in.total_bytes = 2 * in.slot_bytes;
  in.mem_fraction_static = 1.0;
  EXPECT_EQ(plan_state_slots(in).max_sequences, 1);
  in.total_bytes -= 1;
  EXPECT_THROW(plan_state_slots(in), Error);
}

TEST(StatePlan, RejectsBadInput) {
  StatePlanInput in = h200_like();
  in.mem_fraction_static = 0;
  EXPECT_THROW(plan_state_slots(in), Error);
  in = h200_like();
  in.mem_fraction_static = 1.5;
  EXPECT_THROW(plan_state_slots(in), Error);
  in = h200_like();
  in.slot_bytes = 0;
  EXPECT_THROW(plan_state_slots(in), Error);
  in = h200_like();
  in.max_running_requests = 0;
  EXPECT_THROW(plan_state_slots(in), Error);
}

}  // namespace
}  // namespace dsv4::model
