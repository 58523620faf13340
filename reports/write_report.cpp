// Writes a report folder: report.md, report.html, report.json and a Chrome trace per finding
// that has a timeline, each file atomically so a reader never sees half of one.
#include <set>

#include "core/base/atomic_file.hpp"
#include "reports/chrome_trace.hpp"
#include "reports/report.hpp"

namespace shardcheck::reports {

namespace {
// File names stay portable and inside the folder whatever a scenario is called.
std::string file_safe(const std::string& name) {
  std::string out;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    out += ok ? c : '_';
  }
  return out.empty() || out[0] == '.' ? "_" + out : out;
}
}  // namespace

std::vector<std::vector<std::string>> trace_file_names(const Report& r) {
  std::vector<std::vector<std::string>> names(r.scenarios.size());
  std::set<std::string> used;  // two scenarios of one name must not overwrite each other's traces
  for (size_t i = 0; i < r.scenarios.size(); ++i) {
    const ScenarioResult& s = r.scenarios[i];
    std::string base = file_safe(s.name);
    while (!used.insert(base).second) base += "_" + std::to_string(i);  // ends: each pass lengthens it
    names[i].resize(s.findings.size());
    for (size_t f = 0; f < s.findings.size() && f < s.finding_traces.size(); ++f) {
      if (!s.finding_traces[f].slices.empty())
        names[i][f] = "trace-" + base + "-" + std::to_string(f) + ".json";
    }
  }
  return names;
}

core::Status write_report(const Report& r, const std::string& dir) {
  if (core::Status s = core::make_dirs(dir); !s) return s;
  core::Status first;
  auto write = [&](const std::string& name, const std::string& text) {
    core::Status s = core::write_file_atomic(dir + "/" + name, text);
    if (!s && first) first = s;
  };
  // The traces first: the pages name them, so a reader who finds the pages finds the traces.
  const auto traces = trace_file_names(r);
  for (size_t i = 0; i < r.scenarios.size(); ++i) {
    const ScenarioResult& s = r.scenarios[i];
    for (size_t f = 0; f < traces[i].size(); ++f) {
      if (!traces[i][f].empty()) write(traces[i][f], chrome_trace(s.finding_traces[f], {s.findings[f]}));
    }
  }
  write("report.md", to_markdown(r));
  write("report.html", to_html(r));
  write("report.json", to_json(r));
  return first;
}

}  // namespace shardcheck::reports
