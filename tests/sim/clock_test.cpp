// Vector clocks with chunks shared copy-on-write: copies, ticks and joins must behave as
// plain per-component vectors would, whichever chunks the clocks share.
#include <catch2/catch.hpp>

#include "core/base/rng.hpp"
#include "sim/clock.hpp"

using namespace shardcheck;
using sim::VectorClock;

TEST_CASE("a copied clock does not see the original's later ticks, nor the original the copy's",
          "[sim][clock]") {
  VectorClock a(200);
  a.tick(5);
  VectorClock b = a;
  a.tick(5);
  b.tick(130);
  REQUIRE(a[5] == 2);
  REQUIRE(b[5] == 1);
  REQUIRE(b[130] == 1);
  REQUIRE(a[130] == 0);
}

TEST_CASE("join takes the larger component where either clock dominates a chunk or neither does",
          "[sim][clock]") {
  VectorClock a(128), b(128);
  a.tick(1);  // chunk 0: a ahead
  b.tick(70);
  b.tick(70);  // chunk 1: b ahead
  VectorClock c = a;
  c.tick(2);
  b.tick(3);  // chunk 0 differs both ways between c and b
  c.join(b);
  REQUIRE(c[1] == 1);
  REQUIRE(c[2] == 1);
  REQUIRE(c[3] == 1);
  REQUIRE(c[70] == 2);
  // The sources are unchanged by the join and by later ticks of the result.
  c.tick(70);
  REQUIRE(b[70] == 2);
  REQUIRE(a[2] == 0);
}

TEST_CASE("clocks of different lengths compare and join with missing components as zero", "[sim][clock]") {
  VectorClock a(10), b(1000);
  REQUIRE(a == b);
  b.tick(900);
  REQUIRE_FALSE(a == b);
  a.join(b);
  REQUIRE(a[900] == 1);
  REQUIRE(a == b);
  REQUIRE(a[5000] == 0);
}

TEST_CASE("random ticks, copies and joins match a plain vector of components", "[sim][clock]") {
  constexpr size_t kN = 300;
  core::Rng rng(11);
  std::vector<VectorClock> clocks(6, VectorClock(kN));
  std::vector<std::vector<uint32_t>> plain(6, std::vector<uint32_t>(kN, 0));
  for (int step = 0; step < 20000; ++step) {
    const size_t i = rng.uniform(6), j = rng.uniform(6);
    switch (rng.uniform(3)) {
      case 0: {
        const size_t p = rng.uniform(kN);
        clocks[i].tick(p);
        ++plain[i][p];
        break;
      }
      case 1:
        clocks[i] = clocks[j];
        plain[i] = plain[j];
        break;
      default:
        clocks[i].join(clocks[j]);
        for (size_t p = 0; p < kN; ++p) plain[i][p] = std::max(plain[i][p], plain[j][p]);
    }
    for (size_t p = 0; p < kN; p += 7) REQUIRE(clocks[i][p] == plain[i][p]);
  }
  for (size_t i = 0; i < clocks.size(); ++i) {
    for (size_t p = 0; p < kN; ++p) REQUIRE(clocks[i][p] == plain[i][p]);
  }
}
