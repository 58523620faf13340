// The report renderers: Markdown, one self-contained HTML page with SVG pictures, and JSON
// (schema in reports/README.md), all read from the one model in report_model.hpp, and
// write_report, which puts them and each finding's Chrome trace in a folder.
//   core::Status s = reports::write_report(report, "out/demo");
//   if (!s) std::cerr << s.message() << "\n";
#pragma once

#include <string>
#include <vector>

#include "core/base/status.hpp"
#include "reports/report_model.hpp"

namespace shardcheck::reports {

std::string to_markdown(const Report& r);
// One page: inline CSS and SVG, no scripts, nothing fetched from anywhere.
std::string to_html(const Report& r);
// {"schema": "shardcheck-report", "schema_version": 1, ...}; see reports/README.md.
std::string to_json(const Report& r);

// The Chrome trace file name of each finding that has a timeline ("" where it has none),
// indexed [scenario][finding]: trace-<scenario name>-<finding index>.json, the name reduced
// to [A-Za-z0-9._-] and made unique across scenarios.
std::vector<std::vector<std::string>> trace_file_names(const Report& r);

// Whether `dir` may take a report: a new folder (its existing ancestors folders), an empty
// one, or one an earlier report made (marked by a .shardcheck-report file) holding files and
// links only. Anything else, such as `/` or a working folder of the user's, is refused with
// the reason; check it before a run, so a refusal costs nothing.
core::Status check_report_folder(const std::string& dir);

// Writes report.md, report.html, report.json and the trace files into `dir` (created if
// missing and marked as a report folder), swapping the whole folder in at once; the user's
// files in it are kept. A folder check_report_folder refuses is left untouched. Tries every
// file; returns the first error.
core::Status write_report(const Report& r, const std::string& dir);

}  // namespace shardcheck::reports
