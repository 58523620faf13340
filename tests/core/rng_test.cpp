// The seeded engine: reproducible, splittable independently of draws, and its hand-written
// distributions stay in range and are not grossly biased.
#include <catch2/catch.hpp>
#include <vector>

#include "core/base/rng.hpp"

using shardcheck::core::Rng;

TEST_CASE("same seed draws the same sequence, a different seed does not", "[core][rng]") {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next();
    REQUIRE(x == b.next());
    differs |= x != c.next();
  }
  REQUIRE(differs);
}

TEST_CASE("known first outputs pin the algorithm across machines", "[core][rng]") {
  // Literal values, written once from xoshiro256** seeded through SplitMix64: if these change,
  // every seed in every user's bug report replays differently. tests/golden/digests.txt pins
  // more seeds and the distributions; this is the short, readable check.
  Rng r(1);
  REQUIRE(r.next() == 0xc5883e370b0926c3ULL);
  REQUIRE(r.next() == 0x021b74b80f71f81cULL);
  REQUIRE(r.next() == 0x268df06749e5c8ceULL);
  Rng zero(0);
  REQUIRE(zero.next() == 0x1a70a846bd9cc2a9ULL);
  REQUIRE(Rng(42).split("scheduler").next() == 0x404eff1d97a7b4daULL);
}

TEST_CASE("split depends on the key and the seed, not on draws from the parent", "[core][rng]") {
  Rng parent(7);
  Rng before = parent.split("scheduler");
  for (int i = 0; i < 10; ++i) parent.next();
  Rng after = parent.split("scheduler");
  REQUIRE(before.next() == after.next());
  REQUIRE(parent.split("scheduler").next() != parent.split("allocator").next());
  REQUIRE(parent.split(uint64_t{0}).next() != parent.split(uint64_t{1}).next());
}

TEST_CASE("uniform(bound) stays in range and covers every value", "[core][rng]") {
  Rng r(3);
  std::vector<int> seen(7, 0);
  for (int i = 0; i < 7000; ++i) {
    const uint64_t v = r.uniform(7);
    REQUIRE(v < 7);
    seen[v]++;
  }
  for (int count : seen) {
    REQUIRE(count > 800);  // expected 1000 each; a biased mapping would starve some
    REQUIRE(count < 1200);
  }
  for (int i = 0; i < 100; ++i) {
    const int64_t v = r.uniform_int(-3, 3);
    REQUIRE(v >= -3);
    REQUIRE(v <= 3);
  }
}

TEST_CASE("uniform_real lies in the unit interval and normal has mean 0 and variance near 1", "[core][rng]") {
  Rng r(5);
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform_real();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    const double z = r.normal();
    sum += z;
    sq += z * z;
  }
  REQUIRE(std::abs(sum / n) < 0.05);
  REQUIRE(std::abs(sq / n - 1.0) < 0.05);
}

TEST_CASE("shuffle is a permutation and depends on the seed", "[core][rng]") {
  std::vector<int> a{0, 1, 2, 3, 4, 5, 6, 7}, b = a;
  Rng(1).shuffle(std::span<int>(a));
  Rng(2).shuffle(std::span<int>(b));
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(sorted == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  REQUIRE(a != b);
}
