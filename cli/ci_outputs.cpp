// The CI outputs of `run` and `explore`: JUnit XML and SARIF written from the report model,
// each finding placed in its source by run/finding_location.
#include "cli/ci_outputs.hpp"

#include <iostream>

#include "cli/version.hpp"
#include "core/base/atomic_file.hpp"
#include "core/base/text.hpp"
#include "run/finding_location.hpp"

namespace shardcheck::cli {

void add_ci_options(CLI::App* cmd, CiArgs& a) {
  cmd->add_option(
      "--junit", a.junit,
      "Write JUnit XML to this file: a test case per scenario, failed when its expectation is not met");
  cmd->add_option(
      "--sarif", a.sarif,
      "Write SARIF 2.1.0 to this file: a result per finding, at the line of the scenario file (or "
      "Python source) it concerns");
}

void CiRecord::add(const LoadedScenario& s, const reports::ScenarioResult& r) {
  places.push_back(locate_findings(s, r.findings));
  stated.push_back(!s.capture() && s.expect.given);
}

void CiRecord::not_reached(const std::vector<LoadedScenario>& all, size_t ran, const std::string& why) {
  for (size_t i = ran; i < all.size(); ++i) not_run.push_back({all[i].file, "not run: " + why, false});
}

bool write_ci(const CiArgs& a, const reports::Report& report, CiRecord record) {
  if (!a.any()) return true;
  const reports::CiInput in{report, std::move(record.places), std::move(record.stated),
                            std::move(record.not_run)};
  bool ok = true;
  auto write = [&](const std::string& path, const std::string& text) {
    if (path.empty()) return;
    if (auto st = core::write_file_atomic(path, text); !st) {
      std::cerr << "shardcheck: " << core::printable(st.message()) << "\n";
      ok = false;
    }
  };
  write(a.junit, reports::junit_xml(in));
  write(a.sarif, reports::sarif_json(in, std::string(kVersion)));
  return ok;
}

int refused_input(const CiArgs& a, const std::string& command, const std::vector<LoadedScenario>& loaded,
                  std::vector<reports::NotRun> refused) {
  reports::Report report;
  report.command = command;
  report.complete = false;
  report.stopped = reports::Report::kBadInput;
  report.incomplete_reason = "bad input: nothing ran";
  CiRecord record;
  record.not_run = std::move(refused);
  record.not_reached(loaded, 0, "another file given is bad input");
  write_ci(a, report, std::move(record));
  return kBadInput;
}

}  // namespace shardcheck::cli
