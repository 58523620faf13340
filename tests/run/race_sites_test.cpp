// `run --backend gpu --amplify-at race` chooses what to delay on the simulator, without a GPU:
// of each race's two accesses, the one the program issued first, once per operation.
#include <catch2/catch.hpp>

#include "run/scenario.hpp"
#include "run/gpu_runs.hpp"

using namespace shardcheck;

namespace {
run::LoadedScenario load(const std::string& rel) {
  auto s = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/" + rel);
  REQUIRE(s);
  return std::move(*s);
}
}  // namespace

TEST_CASE("race sites: the earlier-issued access of each race, nothing from fixed programs", "[cli][gpu-replay]") {
  const auto sites = run::race_sites({load("trace/reuse-race.yaml"), load("trace/reuse-fix-record-stream.yaml"),
                                      load("trace/cross-stream-read-race.yaml")});
  REQUIRE(sites.size() == 2);
  // The reduce-scatter reads the block that the next allocation writes.
  CHECK(sites[0].rank == 0);
  CHECK(sites[0].stream == "rs");
  CHECK(sites[0].op == "reduce_scatter 'grad'");
  CHECK(sites[0].scenario == "reuse-race");
  // The read may run first in the simulator's schedule, but the write was issued first: on
  // hardware the write is the one to hold back.
  CHECK(sites[1].stream == "side");
  CHECK(sites[1].op == "kernel 'produce'");
  REQUIRE(run::race_sites({load("trace/reuse-fix-record-stream.yaml"), load("trace/reuse-fix-alloc-on-rs.yaml")}).empty());
}

TEST_CASE("race sites: the catalog's main-grad race is the accumulation on the RS stream", "[cli][gpu-replay]") {
  const auto sites = run::race_sites({load("catalog/main-grad-alloc-default-stream.yaml"), load("catalog/main-grad-alloc-default-stream-fixed.yaml")});
  REQUIRE(sites.size() == 1);
  CHECK(sites[0].rank == 0);
  CHECK(sites[0].stream == "rs");
  CHECK(sites[0].op == "kernel 'block.2.accumulate'");
  CHECK(sites[0].seed == 2);
}
