// `run --backend gpu --force-race` takes its holds from the simulator, without a GPU: each race's
// first-issued access, held until the other, both named by rank, stream, operation and
// occurrence; and the hardware verdict holds a file's expectation to what the runs showed.
#include <catch2/catch.hpp>

#include "core/scenario/expectation.hpp"
#include "run/gpu_runs.hpp"

using namespace shardcheck;

namespace {
run::LoadedScenario load(const std::string& rel) {
  auto s = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/" + rel);
  REQUIRE(s);
  return std::move(*s);
}
}  // namespace

TEST_CASE("forced holds: the reuse race holds the reduce-scatter until the next allocation's write",
          "[cli][gpu-replay]") {
  const auto holds =
      run::forced_holds({load("trace/reuse-race.yaml"), load("trace/reuse-fix-record-stream.yaml")});
  REQUIRE(holds.size() == 1);  // rank 1's instance of the same race is a duplicate of rank 0's finding
  const run::ForcedHold& h = holds[0];
  CHECK(h.first_rank == 0);
  CHECK(h.first_stream == "rs");
  CHECK(h.first_op == "reduce_scatter 'grad'");
  CHECK(h.first_occurrence == 0);
  CHECK(h.second_rank == 0);
  CHECK(h.second_stream == "compute");
  CHECK(h.second_op == "kernel 'next_forward'");
  CHECK(h.second_occurrence == 0);
  CHECK(h.freed_buffer == "grad");  // a reuse race: the next allocation receives grad's block
  CHECK(h.reusing_buffer == "act");
  CHECK(h.scenario == "reuse-race");
  CHECK(h.seed == 1);
  // A fixed program has no race, so no hold of its own.
  REQUIRE(
      run::forced_holds({load("trace/reuse-fix-alloc-on-rs.yaml"), load("trace/reuse-fix-persistent.yaml")})
          .empty());
}

TEST_CASE("forced holds: the main-grad race names which accumulation and which receive",
          "[cli][gpu-replay]") {
  const auto holds = run::forced_holds({load("catalog/main-grad-alloc-default-stream.yaml")});
  REQUIRE(holds.size() == 2);
  // The accumulation of the last microbatch before the receive that reuses the block, and the
  // finalizing reduce-scatter of the same block: two races, one second access, in the third
  // step (the 12th accumulation, the third finalization and receive). The block is freed at
  // every step; which step's receive takes it depends on what else the allocator holds (until
  // the engines gathered the embedding for its backward, the first and the third step raced).
  CHECK(holds[0].first_stream == "rs");
  CHECK(holds[0].first_op == "kernel 'block.2.accumulate'");
  CHECK(holds[0].first_occurrence == 11);
  CHECK(holds[0].second_occurrence == 2);
  CHECK(holds[1].first_op == "reduce_scatter 'block.2:grad.finalize'");
  CHECK(holds[1].first_occurrence == 2);
  CHECK(holds[1].second_occurrence == 2);
  for (const auto& h : holds) {
    CHECK(h.second_stream == "p2p.bwd.recv");
    CHECK(h.second_op == "recv 'grad:1:mb2' from 3");
    CHECK(h.freed_buffer == "block.2.main_grad");
    CHECK(h.reusing_buffer == "recv:grad:1:mb2");
  }
}

TEST_CASE("hardware verdict: expectations held to what the runs showed", "[cli][gpu-replay]") {
  using Is = run::HardwareVerdict::Is;
  core::Expectation race;
  race.findings = {core::FindingKind::stream_race};
  core::Expectation clean;
  core::Expectation divergence;
  divergence.findings = {core::FindingKind::numerics_divergence};
  core::Expectation none;
  none.given = false;
  // A forced race must change values in every run.
  CHECK(run::hardware_verdict(race, {10, 10, 0, 0}, true).is == Is::met);
  CHECK(run::hardware_verdict(race, {10, 9, 0, 0}, true).is == Is::not_met);
  // A forced order that changed no kept value is unconfirmed; forced in some runs only, not met.
  CHECK(run::hardware_verdict(race, {10, 0, 0, 0, 10}, true).is == Is::unconfirmed);
  CHECK(run::hardware_verdict(race, {10, 0, 0, 0, 9}, true).is == Is::not_met);
  CHECK(run::hardware_verdict(race, {10, 0, 0, 0, 0}, true).is == Is::unconfirmed);
  // Values cannot show an uninitialized read; a local send cycle completes.
  core::Expectation uninit;
  uninit.findings = {core::FindingKind::uninitialized_read};
  CHECK(run::hardware_verdict(uninit, {2, 0, 0, 0}, false).is == Is::unconfirmed);
  core::Expectation mismatch;
  mismatch.findings = {core::FindingKind::collective_mismatch};
  CHECK(run::hardware_verdict(mismatch, {2, 0, 0, 0}, false).is == Is::not_met);
  CHECK(run::hardware_verdict(mismatch, {2, 0, 2, 0}, false).is == Is::met);
  // Unforced, a race that changed nothing is unconfirmed, and one that did is met.
  CHECK(run::hardware_verdict(race, {10, 0, 0, 0}, false).is == Is::unconfirmed);
  CHECK(run::hardware_verdict(race, {10, 2, 0, 0}, false).is == Is::met);
  // A fix is met only when no run shows anything.
  CHECK(run::hardware_verdict(clean, {10, 0, 0, 0}, true).is == Is::met);
  CHECK(run::hardware_verdict(clean, {10, 1, 0, 0}, true).is == Is::not_met);
  CHECK(run::hardware_verdict(clean, {10, 0, 1, 0}, false).is == Is::not_met);
  CHECK(run::hardware_verdict(clean, {10, 0, 0, 1}, false).is == Is::not_met);
  // A deterministic bug is met when some run shows it; a run stopped by the program counts.
  CHECK(run::hardware_verdict(divergence, {3, 3, 0, 0}, false).is == Is::met);
  CHECK(run::hardware_verdict(divergence, {3, 0, 3, 0}, false).is == Is::met);
  CHECK(run::hardware_verdict(divergence, {3, 0, 0, 0}, false).is == Is::not_met);
  const auto v = run::hardware_verdict(none, {2, 1, 0, 0}, false);
  CHECK(v.is == Is::no_expectation);
  CHECK(v.text == "no expectation; 1 of 2 runs differ");
  CHECK(run::hardware_verdict(race, {10, 10, 0, 0}, true).text ==
        "expected stream_race; forced, 10 of 10 runs differ");
}
