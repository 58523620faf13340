// --junit FILE and --sarif FILE on `run` and `explore` (docs/ci.md): the options, what the
// outputs gather as scenarios finish, and writing them however the command ends (every
// scenario judged, bad input, an interrupt, an internal error).
//   CiRecord ci;  ci.add(loaded, report.scenarios.back());   // as each scenario finishes
//   ci.not_reached(all, ran, interrupt_reason());            // after a stop
//   if (!write_ci(args, report, std::move(ci))) return kInternalError;
#pragma once

#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "reports/ci_formats.hpp"
#include "run/scenario.hpp"

namespace shardcheck::cli {

struct CiArgs {
  std::string junit;
  std::string sarif;
  bool any() const { return !junit.empty() || !sarif.empty(); }
};

void add_ci_options(CLI::App* cmd, CiArgs& a);

// What the CI outputs hold, gathered as scenarios finish.
struct CiRecord {
  std::vector<std::vector<reports::FindingPlace>> places;
  std::vector<bool> stated;
  std::vector<reports::NotRun> not_run;

  // A scenario that ran, with its findings placed in their sources.
  void add(const LoadedScenario& s, const reports::ScenarioResult& r);
  // The files after the first `ran` that never ran: the command stopped first.
  void not_reached(const std::vector<LoadedScenario>& all, size_t ran, const std::string& why);
};

// Writes the requested files atomically; false (after saying why) when one could not be.
bool write_ci(const CiArgs& a, const reports::Report& report, CiRecord record);

// After bad input, before anything ran: each refused file an error, the loaded ones skipped.
// Returns kBadInput.
int refused_input(const CiArgs& a, const std::string& command, const std::vector<LoadedScenario>& loaded,
                  std::vector<reports::NotRun> refused);

}  // namespace shardcheck::cli
