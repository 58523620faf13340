// Turning scenario runs into reports: each finding's timeline (a replay of the seed that
// found it), loss curves for training scenarios, and the report folder.
//   reports::ScenarioResult r = scenario_result(loaded, outcome, overrides, {.traces = true});
#pragma once

#include <string>

#include "cli/driver.hpp"
#include "reports/report_model.hpp"

namespace shardcheck::cli {

struct ResultOptions {
  bool traces = true;    // replay each finding's seed for its timeline
  bool compare = false;  // training scenarios: loss curves against the single-rank reference
};

reports::ScenarioResult scenario_result(const LoadedScenario& s, const ScenarioOutcome& o, const ScheduleOverrides& overrides,
                                        ResultOptions options);

// Writes the report and prints where; returns false (after saying why) when it could not.
bool write_report_to(const reports::Report& report, const std::string& dir);

}  // namespace shardcheck::cli
