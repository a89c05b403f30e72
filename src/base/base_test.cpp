#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <vector>

#include "base/check.h"
#include "base/env.h"
#include "base/parallel.h"

namespace dsv4 {

TEST(Check, ThrowsWithMessageAndLocation) {
  try {
    DSV4_CHECK(1 + 1 == 3, "tensor ", "embed.weight", " has ", 2, " dims");
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("tensor embed.weight has 2 dims"), std::string::npos) << what;
    EXPECT_NE(what.find("base_test.cpp"), std::string::npos) << what;
  }
}

TEST(Check, PassingCheckDoesNothing) { EXPECT_NO_THROW(DSV4_CHECK(true, "x")); }

TEST(ParallelFor, CoversEveryIndexOnce) {
  for (int64_t n : {0, 1, 2, 3, 17, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ParallelFor, NestedCallsRunInline) {
  std::atomic<int> total{0};
  parallel_for(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      parallel_for(10, [&](int64_t b2, int64_t e2) { total += static_cast<int>(e2 - b2); });
  });
  EXPECT_EQ(total.load(), 40);
}

TEST(ParallelFor, RethrowsExceptionsFromWorkers) {
  EXPECT_THROW(parallel_for(100, [](int64_t b, int64_t) {
                 if (b > 0) DSV4_FAIL("chunk starting at ", b);
               }),
               Error);
  // The pool still works afterwards.
  std::atomic<int> count{0};
  parallel_for(10, [&](int64_t b, int64_t e) { count += static_cast<int>(e - b); });
  EXPECT_EQ(count.load(), 10);
}

TEST(Env, IntReadsTheValueOrTheFallback) {
  const char* name = "DSV4_BASE_TEST_ENV_INT";
  unsetenv(name);
  EXPECT_EQ(env_int(name, 7), 7);
  setenv(name, "", 1);
  EXPECT_EQ(env_int(name, 7), 7);
  setenv(name, "256", 1);
  EXPECT_EQ(env_int(name, 7), 256);
  setenv(name, "0", 1);
  EXPECT_EQ(env_int(name, 7), 0);
  unsetenv(name);
}

}  // namespace dsv4
