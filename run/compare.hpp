// Comparing a training run against a baseline (the single-rank reference or DistOpt) on the
// simulator: per-step mean losses, their largest differences, and the first weight that
// differs. Used by `shardcheck compare` and by reports.
#pragma once

#include <string>
#include <vector>

#include "run/scenario.hpp"

namespace shardcheck::run {

struct CompareResult {
  std::string label;    // the scenario's strategy
  std::string against;  // single_rank | distopt
  bool exact = false;
  std::vector<double> ours, theirs;  // per-step mean loss
  double max_abs = 0, max_rel = 0;
  std::string first_divergent;  // empty when every step's weights are bitwise equal
  double entropy_rate = 0;
  uint64_t seed = 0;                    // the schedule seed both trainings ran under
  std::vector<core::Finding> findings;  // what the detectors and oracles found in our training
  // What our training's run covered (sim::RunResult's counts).
  int64_t scheduler_steps = 0, operations = 0, collectives = 0, bytes_checked = 0;
  std::string error;
  std::string bad_input;   // the run was refused before it started (compare_steps_problem)
  bool cancelled = false;  // a signal stopped a training run: the result holds what ran before it
};

// "" when `compare --steps steps` (0: the file's) stays within the bounds the file's own steps
// passed (core::training_limits_exceeded: 1..10000 and, with a reference, parameters * steps
// at most 2^24, and parameters * steps * ranks at most 2^25); else the message, naming the file and --steps.
// Every compare path checks it before anything runs; compare_on_sim returns it as `bad_input`.
core::Status compare_steps_problem(const LoadedScenario& s, const std::string& against, int steps);

// `jobs`: threads it may use (0: every core); against DistOpt, the single-rank reference and
// the two trainings at once when it is not 1. The result is the same either way. `schedule`:
// its policy and seed pick the schedule both trainings run (default: the file's first).
CompareResult compare_on_sim(const LoadedScenario& s, const std::string& against, int steps, int jobs = 0,
                             const ScheduleOverrides& schedule = {});

}  // namespace shardcheck::run
