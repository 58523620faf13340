// The driver of commands that run several scenarios (`run`, `demo`): scenarios side by side,
// each exploring on its share of the threads, handed back in order on the calling thread, as
// one thread would; processes that share the command run one scenario at a time, all of them
// together. The command line only prints what it is handed.
//   ScenarioLoop loop{.overrides = o, .check_determinism = true};
//   run_scenarios(loaded, loop, [&](size_t i) { header(i); }, [&](size_t i, CheckedRun c) { ...; return
//   !stop; });
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "run/report.hpp"
#include "run/scenario.hpp"

namespace shardcheck::run {

struct ScenarioLoop {
  ScheduleOverrides overrides;  // for every scenario; its jobs are the whole command's threads
  bool check_determinism = false;
  std::optional<ResultOptions> result;  // assemble each scenario's report entry with these
  bool compare_training = false;        // and, for a training scenario, its loss curves
  bool across_processes = false;        // the processes of an MPI launch share the command
  // A progress callback for each scenario as it starts (a progress line's), or null.
  std::function<std::function<void(int, int)>()> progress;
};

// Runs every scenario of `all`; `turn(i)` when scenario i is next to be handed back, then
// `deliver(i, run)`; once deliver returns false no further scenario starts.
void run_scenarios(const std::vector<LoadedScenario>& all, const ScenarioLoop& loop,
                   const std::function<void(size_t)>& turn,
                   const std::function<bool(size_t, CheckedRun)>& deliver);

}  // namespace shardcheck::run
