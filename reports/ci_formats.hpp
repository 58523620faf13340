// Outputs for CI systems: JUnit XML (one test case per scenario file, a failure holding the
// findings when the expectation is not met) and SARIF 2.1.0 (one result per finding, located
// at the line of the scenario file, or of the captured program's Python source, that it
// concerns), so test views and code-scanning views show what a run found.
//   CiInput in{report, places, not_run};
//   std::string xml = junit_xml(in);  std::string sarif = sarif_json(in, "0.1.0");
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "reports/report_model.hpp"

namespace shardcheck::reports {

// A place in a source file: a scenario file's line, or a Python file's line.
struct SourceSpot {
  std::string file;
  int line = 1;
  std::string note;  // what is there, for a related location: "first access", ...
};

// Where one finding is shown: its main place and the others it names.
struct FindingPlace {
  SourceSpot at;
  std::vector<SourceSpot> related;
  bool expected = false;  // its kind is listed under the file's `expect:` (findings or allow)
};

// A file given but never judged: refused as bad input, or not reached before a stop.
struct NotRun {
  std::string file;
  std::string reason;  // "bad input: FILE:3:7: unknown key 'x'", "interrupted before it ran"
  bool error = false;  // true: an error (bad input); false: skipped
};

struct CiInput {
  const Report& report;
  // places[i][j]: where report.scenarios[i].findings[j] is; missing entries mean line 1 of
  // the scenario's file.
  std::vector<std::vector<FindingPlace>> places;
  // stated[i]: report.scenarios[i] has an `expect:` (a captured program or a file without one
  // states nothing, and fails on any finding); missing entries count as stated.
  std::vector<bool> stated;
  std::vector<NotRun> not_run;
};

std::string junit_xml(const CiInput& in);
std::string sarif_json(const CiInput& in, const std::string& tool_version);

// XML character data and attribute values (in double quotes): & < > " escaped, text made valid UTF-8, and
// characters XML 1.0 cannot hold (C0 controls other than tab and line breaks, U+FFFE, U+FFFF)
// written as \xNN or \uNNNN, as are C1 controls and invisible format characters.
std::string xml_escape(std::string_view s);

}  // namespace shardcheck::reports
