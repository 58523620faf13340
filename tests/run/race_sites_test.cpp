// `run --backend gpu --amplify-at race` chooses what to delay on the simulator, without a GPU:
// of each race's two accesses, the one the program issued first, once per operation.
#include <catch2/catch.hpp>
#include <optional>
#include <variant>

#include "run/gpu_runs.hpp"
#include "run/scenario_run.hpp"

using namespace shardcheck;

namespace {
run::LoadedScenario load(const std::string& rel) {
  auto s = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/" + rel);
  REQUIRE(s);
  return std::move(*s);
}
}  // namespace

TEST_CASE("race sites: the earlier-issued access of each race, nothing from fixed programs",
          "[cli][gpu-replay]") {
  const auto sites =
      run::race_sites({load("trace/reuse-race.yaml"), load("trace/reuse-fix-record-stream.yaml"),
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
  REQUIRE(
      run::race_sites({load("trace/reuse-fix-record-stream.yaml"), load("trace/reuse-fix-alloc-on-rs.yaml")})
          .empty());
}

// The catalog's main-grad race, derived here rather than copied from a run. The operation
// follows from the scenario's program: ZeRO-1 on pp 2 x dp 2 with vpp 2 and 4 layers, so
// virtual stage v runs block.v and pipeline rank 0 (ranks 0 and 1) holds stages 0 and 2.
// Interleaved 1F1B finishes the backward of a rank's last chunk (stage 2, block.2) before its
// chunk 0 backward is done; the mutation allocates block.2's main_grad on the compute stream
// and accumulates into it on 'rs', so once it is freed its block can go to a pipeline receive
// buffer of chunk 0's backward (p2p.bwd.recv) while the accumulation may still run. That
// accumulation is the earlier-issued access. Which schedules race is the scheduler's choice:
// the seed and rank are those of the first of the scenario's schedules (seeds 1..8) that
// races, found by running each seed on its own.
TEST_CASE("race sites: the catalog's main-grad race is the accumulation on the RS stream",
          "[cli][gpu-replay]") {
  const auto s = load("catalog/main-grad-alloc-default-stream.yaml");
  const core::ModelLayout& model = *s.training()->setup.model;
  const core::Mesh& mesh = *s.training()->setup.mesh;
  REQUIRE(model.pp() == 2);
  // The block of pipeline rank 0's last model chunk.
  std::string last_block;
  for (int u : model.units_of(model.vstage_of(0, model.vpp() - 1))) {
    if (model.units()[u].kind == core::Unit::Kind::block) last_block = model.units()[u].name;
  }
  REQUIRE(last_block == "block.2");
  // The first schedule that races, each seed run alone.
  std::optional<core::RaceDetail> race;
  uint64_t race_seed = 0;
  for (int i = 0; i < s.schedule.runs && !race; ++i) {
    run::ScheduleOverrides one;
    one.seed = s.schedule.seed + i;
    one.runs = 1;
    for (const auto& f : run::run_scenario(s, one).explored.findings) {
      const auto* r = std::get_if<core::RaceDetail>(&f.detail);
      if (f.kind != core::FindingKind::stream_race || !r || race) continue;
      race = *r;
      race_seed = *one.seed;
    }
  }
  REQUIRE(race);
  const bool first_issued_first = race->first.op_id <= race->second.op_id;
  const core::AccessSite& earlier = first_issued_first ? race->first : race->second;
  const core::AccessSite& later = first_issued_first ? race->second : race->first;
  CHECK(mesh.coords(earlier.rank)[mesh.axis("pp")] == 0);
  CHECK(earlier.stream == "rs");
  CHECK(earlier.op == "kernel '" + last_block + ".accumulate'");
  CHECK(later.rank == earlier.rank);
  CHECK(later.stream == "p2p.bwd.recv");

  const auto sites = run::race_sites({s, load("catalog/main-grad-alloc-default-stream-fixed.yaml")});
  // Two operations on 'rs' use the freed block, the accumulation and the finalizing
  // reduce-scatter that reads it: two races, two sites, on the same rank and schedule.
  REQUIRE(sites.size() == 2);
  CHECK(sites[0].rank == earlier.rank);
  CHECK(sites[0].stream == "rs");
  CHECK(sites[0].op == "kernel '" + last_block + ".accumulate'");
  CHECK(sites[0].seed == race_seed);
  CHECK(sites[1].rank == earlier.rank);
  CHECK(sites[1].stream == "rs");
  CHECK(sites[1].op == "reduce_scatter '" + last_block + ":grad.finalize'");
}
