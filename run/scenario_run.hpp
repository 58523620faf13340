// Running a loaded scenario on the simulator: exploring its schedules, judging the findings
// against its expectation, and the determinism check that reruns what was explored.
//   auto s = load_scenario("scenarios/trace/reuse-race.yaml");
//   ScenarioOutcome o = run_scenario(*s, {});
#pragma once

#include <optional>
#include <string>

#include "core/scenario/expectation.hpp"
#include "run/scenario.hpp"
#include "sim/explore.hpp"

namespace shardcheck::run {

// The determinism check (`--check-determinism`, and always in the demo): every schedule a
// scenario explored, run again with the same seed, must give the same trace digest, and the
// whole exploration the same findings. A difference means shardcheck itself is at fault.
struct DeterminismCheck {
  int runs = 0;  // schedules rerun and compared
  bool matched = true;
  std::string mismatch;  // the first difference (run, seed, both digests); empty when matched
};

struct ScenarioOutcome {
  sim::ExploreResult explored;
  core::ExpectationResult judged;
  double seconds = 0;
  std::optional<DeterminismCheck> determinism;  // set when the check ran
  std::string jobs_note;                        // why fewer schedules ran at once than asked (memory), or ""
};

// Explores a scenario's schedules; exploration ends at the first internal error.
ScenarioOutcome run_scenario(const LoadedScenario& s, const ScheduleOverrides& o);
// Reruns what `first` explored (not after a cancelled exploration: there is nothing whole to
// compare). A rerun cut short by a signal compares the schedules it finished.
DeterminismCheck check_determinism(const LoadedScenario& s, const ScheduleOverrides& o,
                                   const ScenarioOutcome& first);

// A test hook, read once from the environment variable SHARDCHECK_TEST_FAULT and checked
// nowhere else, so tests can drive paths a correct build never takes:
//   internal_error  the second schedule of every scenario throws, as a bug in shardcheck would;
//   nondeterminism  the determinism rerun starts one seed late, as a run that did not repeat.
enum class TestFault { none, internal_error, nondeterminism };
TestFault test_fault();

}  // namespace shardcheck::run
