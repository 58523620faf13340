// Loading a scenario file of any kind (by its `kind:`) into what every subcommand runs: its
// program factory, its simulator options, its expectation and, for training, its state.
//   auto s = load_scenario("scenarios/trace/reuse-race.yaml");
//   sim::Options first = options_for(*s, {}).value();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "core/base/status.hpp"
#include "core/scenario/captured_program.hpp"
#include "core/scenario/expectation.hpp"
#include "core/scenario/trace_scenario.hpp"
#include "run/training_run.hpp"
#include "sim/explore.hpp"

namespace shardcheck::run {

// What a scenario loaded, which its `factory` runs: a trace program, a training run's state
// (the scenario, its setup and the reference), or a captured program; exactly one, never null.
using ScenarioProgram =
    std::variant<std::shared_ptr<const core::TraceScenario>, std::shared_ptr<TrainingState>,
                 std::shared_ptr<const core::CapturedProgram>>;

struct LoadedScenario {
  std::string file;
  std::string name;
  std::string description;
  core::Expectation expect;
  core::ScheduleSpec schedule;
  sim::Options options;  // ranks, allocator, policy and seed from the file
  sim::Factory factory;  // builds each run's program (and its oracles)
  ScenarioProgram program;
  int64_t bytes_per_run = 0;  // a trace's bytes touched per schedule (TraceLimits)
  // A captured program whose ranks did not all finish: where and why each stopped
  // (core::CapturedProgram::partial). Such a program is never clean.
  std::string partial;

  // The typed way to ask what a scenario is: the program of that kind, or null.
  const core::TraceScenario* trace() const;
  TrainingState* training() const;
  const core::CapturedProgram* capture() const;
  // "trace", "training" or "capture" (a captured program's folder), as reports name it.
  std::string_view kind() const;
};

// Loads and validates a scenario; the error message is `file:line:column: message`. A folder of
// rank-*.jsonl files is a captured program (docs/capture-format.md), whose errors read
// `DIR/rank-R.jsonl:line: message`.
core::Expected<LoadedScenario> load_scenario(const std::string& path);

// Schedules explored of a captured program unless --runs says otherwise.
inline constexpr int kCaptureRuns = 20;

// Command-line overrides of a scenario's schedule.
struct ScheduleOverrides {
  std::optional<std::string> policy;
  std::optional<uint64_t> seed;
  std::optional<int> runs;
  bool stop_at_first = false;
  int jobs = 1;  // threads running schedules at once (sim::ExploreOptions::jobs; 0: every core)
  // Scenarios running side by side in this process, sharing its memory: each caps its threads
  // to its share (run/memory_budget.hpp).
  int sharing = 1;
  // Share the seeds among the processes of an MPI launch (run/processes.hpp). Every process
  // must then run the same scenarios in the same order, one at a time.
  bool across_processes = false;
  // After each schedule (the determinism rerun's count on from the first pass's).
  std::function<void(int schedules_done, int findings)> progress;
};

// The simulator options of a scenario's first schedule. They carry the interrupt flag
// (run/interrupt.hpp), so every run stops early once a signal has arrived.
core::Expected<sim::Options> options_for(const LoadedScenario& s, const ScheduleOverrides& o);

}  // namespace shardcheck::run
