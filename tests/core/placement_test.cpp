// Placements: parsing, printing, and the Flat-suffix rule.
#include <catch2/catch.hpp>

#include "core/layout/placement.hpp"

using namespace shardcheck::core;

TEST_CASE("placements round-trip through their names", "[core][placement]") {
  for (auto p : {Placement::replicate(), Placement::flat(), Placement::partial(ReduceOp::sum),
                 Placement::partial(ReduceOp::avg)}) {
    REQUIRE(Placement::parse(p.to_string()).value() == p);
  }
  REQUIRE_FALSE(Placement::parse("Shard(0)").ok());
  REQUIRE(Placement::partial(ReduceOp::sum) != Placement::partial(ReduceOp::avg));
}

TEST_CASE("Flat axes must form a suffix", "[core][placement]") {
  const auto R = Placement::replicate(), F = Placement::flat(), P = Placement::partial(ReduceOp::avg);
  REQUIRE(validate_placements(std::vector{R, F}).ok());
  REQUIRE(validate_placements(std::vector{F, F}).ok());
  REQUIRE(validate_placements(std::vector{P, F}).ok());
  REQUIRE(validate_placements(std::vector{P, R}).ok());
  const Status s = validate_placements(std::vector{F, R});
  REQUIRE_FALSE(s.ok());
  REQUIRE_THAT(s.message(), Catch::Contains("Flat axes must form a suffix"));
  REQUIRE_FALSE(validate_placements(std::vector<Placement>{}).ok());
  REQUIRE(to_string(std::vector{R, F}) == "[Replicate, Flat]");
}
