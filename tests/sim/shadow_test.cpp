// Shadow memory: happens-before checks per byte range, history across lifetimes, and
// definedness tracking, with interval coalescing keeping the map small.
#include <catch2/catch.hpp>

#include "sim/shadow.hpp"

using namespace shardcheck::sim;

namespace {
VectorClock clock_with(size_t n, std::initializer_list<std::pair<size_t, uint32_t>> entries) {
  VectorClock c(n);
  for (auto [p, v] : entries) {
    for (uint32_t i = 0; i < v; ++i) c.tick(p);
  }
  return c;
}
}  // namespace

TEST_CASE("unordered write after read conflicts, ordered one does not", "[sim][shadow]") {
  Shadow s;
  std::vector<Shadow::Conflict> out;
  const VectorClock a = clock_with(4, {{1, 1}});
  s.access(100, 200, {1, 1, 7, 0}, Access::read, a, out);
  REQUIRE(out.empty());
  // Participant 2 has not seen participant 1's epoch 1: conflict naming op 7.
  s.access(150, 160, {2, 1, 8, 0}, Access::write, clock_with(4, {{2, 1}}), out);
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].prior.op == 7);
  REQUIRE(out[0].prior_kind == Access::read);
  out.clear();
  // Participant 3 has seen participant 1 up to 1 and participant 2 up to 1: ordered.
  s.access(100, 200, {3, 1, 9, 0}, Access::write, clock_with(4, {{1, 1}, {2, 1}, {3, 1}}), out);
  REQUIRE(out.empty());
}

TEST_CASE("reads of the same participant never conflict and reads do not conflict with reads",
          "[sim][shadow]") {
  Shadow s;
  std::vector<Shadow::Conflict> out;
  s.access(0, 64, {1, 1, 1, 0}, Access::write, clock_with(3, {{1, 1}}), out);
  s.access(0, 64, {1, 2, 2, 0}, Access::read, clock_with(3, {{1, 2}}), out);
  REQUIRE(out.empty());
  s.access(0, 64, {2, 1, 3, 0}, Access::read, clock_with(3, {{1, 2}, {2, 1}}), out);
  s.access(0, 64, {1, 3, 4, 0}, Access::read, clock_with(3, {{1, 3}}), out);
  REQUIRE(out.empty());
}

TEST_CASE("history survives a new lifetime, which starts undefined when first touched", "[sim][shadow]") {
  Shadow s;
  std::vector<Shadow::Conflict> out;
  s.access(0, 128, {1, 1, 1, 0}, Access::write, clock_with(3, {{1, 1}}), out);
  Shadow::Ranges undef;
  s.undefined(0, 128, 0, undef);
  REQUIRE(undef.empty());
  // For lifetime 1 (a later allocation of the block) nothing has been written yet.
  s.undefined(0, 256, 1, undef);
  REQUIRE(undef == Shadow::Ranges{{0, 256}});
  // The new lifetime's first write from another participant still meets the old write.
  s.access(0, 64, {2, 1, 2, 1}, Access::write, clock_with(3, {{2, 1}}), out);
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].prior.lifetime == 0);
  undef.clear();
  s.undefined(0, 128, 1, undef);
  REQUIRE(undef == Shadow::Ranges{{64, 128}});
  // The old lifetime's bytes [64, 128) are still its own: an in-flight reader sees them.
  undef.clear();
  s.undefined(64, 128, 0, undef);
  REQUIRE(undef.empty());
}

TEST_CASE("a read by a newer lifetime leaves the old lifetime's bytes defined", "[sim][shadow]") {
  Shadow s;
  std::vector<Shadow::Conflict> out;
  Shadow::Ranges started;
  s.access(0, 128, {1, 1, 1, 0}, Access::write, clock_with(3, {{1, 1}}), out);
  // Lifetime 1 (the block handed to a new buffer, after the write) only reads: no byte changes.
  s.access(0, 128, {2, 1, 2, 1}, Access::read, clock_with(3, {{1, 1}, {2, 1}}), out, &started);
  REQUIRE(out.empty());
  REQUIRE(started.empty());
  // Its read is of never-written bytes, for lifetime 1.
  Shadow::Ranges undef;
  s.undefined(0, 128, 1, undef);
  REQUIRE(undef == Shadow::Ranges{{0, 128}});
  // A later, correctly ordered read of lifetime 0 still sees the bytes its write defined.
  undef.clear();
  s.undefined(0, 128, 0, undef);
  REQUIRE(undef.empty());
  s.access(0, 128, {1, 2, 3, 0}, Access::read, clock_with(3, {{1, 2}}), out);
  REQUIRE(out.empty());
  // Lifetime 1's first write ends lifetime 0 and meets its unordered read.
  s.access(0, 64, {2, 2, 4, 1}, Access::write, clock_with(3, {{1, 1}, {2, 2}}), out, &started);
  REQUIRE(started == Shadow::Ranges{{0, 64}});
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].prior.op == 3);
  undef.clear();
  s.undefined(0, 128, 1, undef);
  REQUIRE(undef == Shadow::Ranges{{64, 128}});
}

TEST_CASE("equal neighbouring intervals coalesce", "[sim][shadow]") {
  Shadow s;
  std::vector<Shadow::Conflict> out;
  const VectorClock c = clock_with(2, {{1, 1}});
  for (uint64_t a = 0; a < 4096; a += 64) s.access(a, a + 64, {1, 1, 5, 0}, Access::write, c, out);
  REQUIRE(s.intervals() == 1);
  s.set_defined(100, 200, false);
  REQUIRE(s.intervals() == 3);
  s.set_defined(100, 200, true);
  REQUIRE(s.intervals() == 1);
}
