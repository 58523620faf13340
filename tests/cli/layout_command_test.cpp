// `shardcheck layout`: the semantics.md examples through the real binary, JSON shape, and exit 2
// with a reason for malformed input.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.hpp"

using shardcheck::testing::run_shardcheck;

TEST_CASE("layout --json reproduces the first semantics.md example", "[cli][layout]") {
  auto r = run_shardcheck("layout --shapes 5x4,2x6,3 --ranks 2 --json");
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["size"] == 48);
  REQUIRE(j["chunk"] == 12);
  REQUIRE(j["tensors"][0]["offset"] == 0);
  REQUIRE(j["tensors"][1]["offset"] == 24);
  REQUIRE(j["tensors"][2]["offset"] == 20);
  REQUIRE(j["tensors"][1]["row"] == 6);
  REQUIRE(j["tensors"][0]["shape"] == nlohmann::json::array({5, 4}));
  REQUIRE(j["ranks"][1]["offset"] == 24);
  REQUIRE(j["ranks"][1]["owns"][0] == nlohmann::json({{"tensor", 1}, {"first_row", 0}, {"rows", 2}}));
  REQUIRE(j["ranks"][0]["owns"].size() == 2);
}

TEST_CASE("layout prints tables with the second semantics.md example", "[cli][layout]") {
  auto r = run_shardcheck("layout --shapes 4x4,1x6 --ranks 2");
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("size 24 elements"));
  REQUIRE_THAT(r.out, Catch::Contains("18"));
  REQUIRE_THAT(r.out, Catch::Contains("gap elements: 2, padding elements: 0"));
}

TEST_CASE("malformed layout input exits 2 and says what is wrong", "[cli][layout]") {
  struct Case {
    const char* args;
    const char* says;
  };
  for (Case c : {Case{"layout --shapes 5x0 --ranks 2", "at least 1"},
                 Case{"layout --shapes 5xq --ranks 2", "not a positive integer"},
                 Case{"layout --shapes 5,,3 --ranks 2", "0-D"},
                 Case{"layout --shapes 5 --ranks 0", "--ranks: 0 is out of range 1..4096"},
                 Case{"layout --shapes 5 --ranks two", "ranks"}, Case{"layout --ranks 2", "shapes"},
                 Case{"nosuchcommand", "nosuchcommand"}}) {
    auto r = run_shardcheck(c.args);
    INFO(c.args << " -> " << r.err);
    REQUIRE(r.exit_code == 2);
    REQUIRE_THAT(r.err, Catch::Contains(c.says));
  }
}
