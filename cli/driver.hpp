// The bridge from scenario files to simulated runs, shared by every subcommand: load a file
// of any kind, turn it into a program and simulator options, run or explore it, and print
// findings with their reproducers.
//   auto s = load_scenario("scenarios/trace/reuse-race.yaml");
//   ScenarioOutcome o = run_scenario(*s, {});
#pragma once

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

#include "core/expectation.hpp"
#include "core/reference.hpp"
#include "core/trainer.hpp"
#include "core/training_scenario.hpp"
#include "core/status.hpp"
#include "sim/explore.hpp"

namespace shardcheck::cli {

struct LoadedScenario {
  std::string file;
  std::string name;
  std::string kind;  // "trace" or "training"
  std::string description;
  core::Expectation expect;
  core::ScheduleSpec schedule;
  sim::Options options;  // ranks, allocator, policy and seed from the file
  sim::Factory factory;  // builds each run's program (and its oracles)
  std::shared_ptr<const void> keep;  // owns what `factory` refers to
  std::shared_ptr<struct TrainingState> training;  // set for training scenarios
};

// A training scenario's shared state: its setup and the single-rank reference (computed
// once, on first use, for every schedule explored).
struct TrainingState {
  core::TrainingScenario scenario;
  core::TrainingSetup setup;
  std::optional<core::ReferenceResult> reference;
  const core::ReferenceResult* ensure_reference();
};

// One simulated training run with the data `compare` prints.
struct TrainingRun {
  sim::RunResult result;
  std::vector<double> losses;                              // per step: mean over microbatches and dp ranks
  std::vector<std::vector<std::vector<float>>> weights;    // per step, per logical parameter
};
TrainingRun run_training(TrainingState& state, const sim::Options& options);

// Loads and validates a scenario; the error message is `file:line:column: message`.
core::Expected<LoadedScenario> load_scenario(const std::string& path);

// Command-line overrides of a scenario's schedule.
struct ScheduleOverrides {
  std::optional<std::string> policy;
  std::optional<uint64_t> seed;
  std::optional<int> runs;
  bool stop_at_first = false;
};

struct ScenarioOutcome {
  sim::ExploreResult explored;
  core::ExpectationResult judged;
  double seconds = 0;
};

core::Expected<sim::Options> options_for(const LoadedScenario& s, const ScheduleOverrides& o);
ScenarioOutcome run_scenario(const LoadedScenario& s, const ScheduleOverrides& o);

// Prints each finding once: summary, explanation, and `shardcheck replay FILE --seed S`.
void print_findings(std::ostream& out, const LoadedScenario& s, const std::vector<core::Finding>& findings,
                    const std::string& policy_flag);
void print_verdict(std::ostream& out, const LoadedScenario& s, const core::ExpectationResult& r);

}  // namespace shardcheck::cli
