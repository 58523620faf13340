// Where each finding is, for SARIF (reports/ci_formats.hpp): the line of the scenario file's
// program step it concerns (a trace program's kernel, collective, send or recv), the
// `mutations:` entry that puts the bug in a training run, or the Python file:line a captured
// program's finding names; line 1 of the file when nothing more precise is known.
//   std::vector<reports::FindingPlace> p = locate_findings(loaded, result.findings);
#pragma once

#include <vector>

#include "core/check/findings.hpp"
#include "reports/ci_formats.hpp"
#include "run/scenario.hpp"

namespace shardcheck::run {

// One place per finding, in the order given.
std::vector<reports::FindingPlace> locate_findings(const LoadedScenario& s,
                                                   const std::vector<core::Finding>& findings);

}  // namespace shardcheck::run
