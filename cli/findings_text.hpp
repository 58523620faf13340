// What the scenario commands print about a run: each finding with its reproducer, the verdict
// against the scenario's expectation, and the determinism check's line.
//   print_findings(std::cout, loaded, outcome.explored.findings, " --policy pct");
//   print_verdict(std::cout, loaded, outcome.judged);
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "core/check/findings.hpp"
#include "core/scenario/expectation.hpp"
#include "run/report.hpp"
#include "run/scenario_run.hpp"

namespace shardcheck::cli {

// Prints each finding once: summary, explanation, and `shardcheck replay FILE --seed S`.
void print_findings(std::ostream& out, const run::LoadedScenario& s,
                    const std::vector<core::Finding>& findings, const std::string& policy_flag);
void print_verdict(std::ostream& out, const run::LoadedScenario& s, const core::ExpectationResult& r);
// A checked run's verdict, or "ERROR" when its run ended in an error (no "ok" beside an error).
void print_verdict(std::ostream& out, const run::LoadedScenario& s, const run::CheckedRun& c);
// "determinism: 20 schedules rerun with the same seeds, every trace digest repeated", or the
// mismatch, said to be shardcheck's fault rather than the scenario's.
void print_determinism(std::ostream& out, const run::LoadedScenario& s, const run::DeterminismCheck& d);

}  // namespace shardcheck::cli
