// Turning scenario runs into reports: each finding's timeline (a replay of the seed that
// found it), loss curves for training scenarios, and the report folder.
//   reports::ScenarioResult r = scenario_result(loaded, outcome, overrides, {.traces = true});
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "reports/report_model.hpp"
#include "run/scenario_run.hpp"

namespace shardcheck::run {

// What a report's timelines cost: replays run, and slices built over all findings. Each seed
// with findings is replayed once, and each finding's timeline builds at most its window
// (4000 slices), however long the run.
struct ReportCost {
  int replays = 0;
  int64_t slices = 0;
};

struct ResultOptions {
  bool traces = true;          // replay each finding's seed for its timeline
  bool compare = false;        // training scenarios: loss curves against the single-rank reference
  ReportCost* cost = nullptr;  // when set, what the timelines cost is added to it
};

reports::ScenarioResult scenario_result(const LoadedScenario& s, const ScenarioOutcome& o,
                                        const ScheduleOverrides& overrides, ResultOptions options);

// Writes the report and prints where; returns false (after saying why) when it could not.
// A second interrupt waits until the folder is written (run/interrupt.hpp).
// The finding kinds a scenario's runs look for, as a report lists them under "what was checked".
std::vector<std::string> detectors_of(const LoadedScenario& s);

bool write_report_to(const reports::Report& report, const std::string& dir);

// One scenario as `run`, `explore` and `demo` take it: its schedules, the determinism check
// when asked, and its report entry when asked. An exception escaping any of it becomes the
// scenario's internal error instead of ending the command without a report.
struct CheckedRun {
  ScenarioOutcome outcome;
  std::optional<reports::ScenarioResult> result;  // when ResultOptions were given
  std::string error;                              // an internal error, ending in "(seed S)" when a run had it
  // A run reached the simulator's own bound (memory, steps): "FILE: bad input: this file needs
  // more than ... (seed S)". The scenario is not met, and the cut run's findings are not claimed.
  std::string bad_input;
  bool stopped = false;  // a signal cut the exploration short
  bool nondeterministic() const { return outcome.determinism && !outcome.determinism->matched; }
};
CheckedRun run_checked(const LoadedScenario& s, const ScheduleOverrides& o, bool determinism,
                       std::optional<ResultOptions> report);

// Marks a report incomplete: `stopped` is reports::Report::kInterrupted, kInternalError or kBadInput.
void mark_incomplete(reports::Report& r, const char* stopped, const std::string& reason);

// The exit code of a command whose verdict on the expectations is `verdict` (0 or 1): 3 when
// shardcheck itself failed (an internal error, a nondeterministic rerun), else
// interrupt_exit_code() when a signal stopped it (130 SIGINT, 3 SIGTERM), else the verdict.
// A run that reached the simulator's own bound (`bad_input`) makes it 2, after 3 and before a signal.
int exit_code(bool internal_error, bool nondeterministic, int verdict, bool bad_input = false);

}  // namespace shardcheck::run
