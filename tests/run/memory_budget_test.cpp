// The -j cap of run/memory_budget.hpp: as many workers as fit, never none.
#include "run/memory_budget.hpp"

#include <catch2/catch.hpp>
#include <limits>

using shardcheck::run::jobs_within;

TEST_CASE("jobs_within runs as many schedules at once as fit, and always one", "[run][memory]") {
  const int64_t gib = int64_t{1} << 30;
  REQUIRE(jobs_within(2 * gib, 9 * gib, 16) == 4);    // 16 cores, 9 GiB: 4 workers of 2 GiB
  REQUIRE(jobs_within(2 * gib, 64 * gib, 16) == 16);  // room for all
  REQUIRE(jobs_within(2 * gib, 1 * gib, 16) == 1);    // not even one fits: one runs anyway
  REQUIRE(jobs_within(0, 1, 8) == 8);                 // a scenario with no stated bound
  REQUIRE(jobs_within(gib, std::numeric_limits<int64_t>::max(), 3) == 3);  // memory unknown
  REQUIRE(jobs_within(gib, 5 * gib, 0) == 1);
}
