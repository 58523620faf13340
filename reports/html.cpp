// The HTML report: one self-contained page (inline CSS and SVG, no scripts, nothing fetched)
// with the summary table, each scenario's findings with their pictures, and compare results.
#include <sstream>

#include "core/base/text.hpp"
#include "reports/format.hpp"
#include "reports/pictures.hpp"
#include "reports/report.hpp"

namespace shardcheck::reports {

namespace {
using std::string;

constexpr std::string_view kStyle = R"css(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1c2529;margin:24px auto;max-width:1100px;padding:0 16px}
h1{font-size:24px;margin:0 0 8px}h2{font-size:19px;margin:32px 0 8px;border-bottom:1px solid #cfd8dc;padding-bottom:4px}
h3{font-size:15px;margin:0 0 6px}code,pre{font:12.5px/1.4 ui-monospace,"DejaVu Sans Mono",monospace}
pre{background:#f5f7f8;border:1px solid #e0e6e8;border-radius:4px;padding:8px 10px;white-space:pre-wrap;overflow-wrap:anywhere;margin:6px 0}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid #cfd8dc;padding:4px 10px;text-align:left}
th{background:#eceff1}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.ok{color:#2e7d32;font-weight:600}.failed{color:#c62828;font-weight:700}.noverdict{color:#ef6c00;font-weight:600}
.banner{background:#fff3e0;border:2px solid #ef6c00;border-radius:4px;padding:10px 14px;margin:12px 0;font-weight:600}
.error{background:#ffebee;border:1px solid #c62828;border-radius:4px;padding:8px 12px}
.stopped{background:#fff3e0;border:1px solid #ef6c00;border-radius:4px;padding:6px 12px}
.determinism{color:#546e7a;font-size:12.5px}.determinism[data-matched=false]{color:#c62828;font-weight:700;font-size:14px}
.finding{border:1px solid #cfd8dc;border-left:5px solid #c62828;border-radius:4px;padding:12px 14px;margin:14px 0}
.kind{display:inline-block;background:#c62828;color:#fff;border-radius:3px;padding:0 6px;margin-right:6px;font:600 12px ui-monospace,monospace}
.meta{color:#546e7a;font-size:12.5px;margin:0 0 6px}figure{margin:10px 0}svg{max-width:100%;height:auto;font:12px ui-monospace,"DejaVu Sans Mono",monospace}
svg .lane{fill:#f5f7f8;stroke:#cfd8dc}svg .slice{fill:#90a4ae;stroke:#fff;stroke-width:.5}svg .slice-label{fill:#fff;font-size:10px}
svg .lane-label,svg .bar-label,svg .tick{fill:#37474f}svg .tick{font-size:11px}
svg .access{fill:#ffcdd2;fill-opacity:.9;stroke:#d32f2f;stroke-width:2}svg .access-number{fill:#b71c1c;font-weight:700}
svg .access-label{fill:#b71c1c}svg .race-edge{stroke:#d32f2f;stroke-width:2;stroke-dasharray:6 4;fill:none}
svg .race-edge-label{fill:#d32f2f}svg .axis{stroke:#607d8b}svg .grid{stroke:#eceff1}svg .legend{fill:#37474f}
svg .box{fill:#e3f2fd;stroke:#1565c0;stroke-width:1.5}svg .box.never{fill:#fff;stroke:#c62828;stroke-dasharray:5 3}
svg .box-title{fill:#0d47a1;font-weight:700}svg .never-title{fill:#c62828}svg .box-text{fill:#263238}
svg .edge{stroke:#455a64;stroke-width:1.5;fill:none}svg .edge-label{fill:#455a64;font-size:11px}
svg .cell{fill:#f5f7f8;stroke:#cfd8dc}svg .cell.diff{fill:#ffcdd2;stroke:#d32f2f;stroke-width:2}
svg .bar.expected,svg .bar.ok{fill:#66bb6a}svg .bar.bad{fill:#e53935}svg .value{fill:#263238}svg .value.bad{fill:#c62828;font-weight:700}
svg .panel{fill:#fafafa;stroke:#cfd8dc}svg .achievable{stroke:#6d4c41;stroke-width:1.5;stroke-dasharray:6 4}
svg .series.line{fill:none;stroke-width:2}svg .series.line.overlay{stroke-dasharray:7 5;stroke-width:2.5}svg .series.dot{stroke:none}
svg .series.mark{fill:none;stroke-width:1.6}svg .delta.line{stroke:#6d4c41;stroke-width:1.5;fill:none}svg .delta.dot{fill:#6d4c41}svg .grid.zero{stroke:#b0bec5;stroke-dasharray:2 3}
svg .series-0{stroke:#1e88e5;fill:#1e88e5}svg .series-1{stroke:#e53935;fill:#e53935}svg .series-2{stroke:#43a047;fill:#43a047}
svg .series-3{stroke:#8e24aa;fill:#8e24aa}svg .series-4{stroke:#fb8c00;fill:#fb8c00}svg .series-5{stroke:#00897b;fill:#00897b}
svg .series.line.series-0,svg .series.line.series-1,svg .series.line.series-2,svg .series.line.series-3,svg .series.line.series-4,svg .series.line.series-5{fill:none}
svg .series.mark.series-0,svg .series.mark.series-1,svg .series.mark.series-2,svg .series.mark.series-3,svg .series.mark.series-4,svg .series.mark.series-5{fill:none}
)css";

// The CSS class of a result_text.
const char* result_class(const string& result) {
  if (result == "ok" || result == "clean") return "ok";
  return result == "FAILED" || result == "FOUND" || result == "PARTIAL" ? "failed" : "noverdict";
}

string td(const string& text, std::string_view cls = {}) {
  return cls.empty() ? "<td>" + html_escape(text) + "</td>"
                     : "<td class=\"" + string(cls) + "\">" + html_escape(text) + "</td>";
}

string summary_table(const Report& r) {
  string out =
      "<table id=\"summary\"><thead><tr><th>scenario</th><th>expected</th><th>found</th>"
      "<th>schedules explored</th><th>time</th><th>result</th></tr></thead><tbody>";
  for (size_t i = 0; i < r.scenarios.size(); ++i) {
    const ScenarioResult& s = r.scenarios[i];
    const string result = result_text(s);
    out += "<tr><td><a href=\"#scenario-" + std::to_string(i) + "\">" + html_escape(s.name) + "</a></td>" +
           td(s.expected) + td(kinds_text(s.found)) + td(std::to_string(s.schedules), "num") +
           td(seconds_text(s.seconds), "num") + td(result, result_class(result)) + "</tr>";
  }
  return out + "</tbody></table><p>" + html_escape(totals_text(totals(r))) + ".</p>\n";
}

string race_notes(const core::Finding& f) {
  const auto* d = std::get_if<core::RaceDetail>(&f.detail);
  if (!d || d->fixes.empty()) return "";
  string out = "<p>Fixes (any one adds the missing edge):</p><ul class=\"fixes\">";
  for (const auto& fix : d->fixes) out += "<li>" + html_escape(fix) + "</li>";
  return out + "</ul>";
}

string finding_html(const ScenarioResult& s, size_t i, size_t scenario, const string& trace_file) {
  const core::Finding& f = s.findings[i];
  const string kind(core::to_string(f.kind)), id = "f" + std::to_string(scenario) + "-" + std::to_string(i);
  static const core::TraceLog kNoTrace;
  const core::TraceLog& trace = i < s.finding_traces.size() ? s.finding_traces[i] : kNoTrace;
  string out = "<article class=\"finding\" id=\"finding-" + std::to_string(scenario) + "-" +
               std::to_string(i) + "\" data-kind=\"" + kind + "\"><h3><span class=\"kind\">" + kind +
               "</span>" + html_escape(f.summary) + "</h3>";
  out += "<p class=\"meta\">seed " + std::to_string(f.seed) + " · seen " + std::to_string(f.occurrences) +
         (f.occurrences == 1 ? " time" : " times") + " · key <code>" + html_escape(f.key) + "</code></p>";
  if (!f.explanation.empty())
    out +=
        "<pre class=\"explanation\">" + html_escape(f.explanation + "\n" + core::spread_text(f)) + "</pre>";
  out +=
      "<p>Reproduce:</p><pre class=\"reproducer\"><code>" + html_escape(reproducer(s, f)) + "</code></pre>";
  out += "<figure>" + finding_picture(f, trace, id) + "</figure>" + race_notes(f);
  if (!trace_file.empty()) {
    out += "<p class=\"meta\">Timeline of this run: <code>" + html_escape(trace_file) +
           "</code> beside this page (Chrome trace; Perfetto opens it)";
    const string cut = cut_text(trace);
    out += (cut.empty() ? "" : "; " + html_escape(cut)) + ".</p>";
  }
  return out + "</article>\n";
}

string loss_table(const CompareData& c) {
  string out = "<table class=\"losses\"><thead><tr><th>step</th>";
  for (const auto& s : c.series) out += "<th>" + html_escape(s.label) + "</th>";
  out += "<th>max |Δ|</th><th>relative Δ</th></tr></thead><tbody>";
  for (size_t step = 0; step < compare_steps(c); ++step) {
    out += "<tr>" + td(std::to_string(step), "num");
    for (const auto& s : c.series) out += td(step < s.losses.size() ? number(s.losses[step]) : "—", "num");
    const StepDelta d = step_delta(c, step);
    out += td(d.present ? number(d.abs, 3) : "—", "num") + td(d.present ? number(d.rel, 3) : "—", "num") +
           "</tr>";
  }
  return out + "</tbody></table>";
}

string compare_html(const ScenarioResult& s, const CompareData& c, size_t scenario) {
  string out = "<section class=\"compare\"><h3>Compare against " + html_escape(c.against) + "</h3>";
  out += "<figure>" + loss_plot(c, "loss" + std::to_string(scenario)) + "</figure>";
  if (!c.series.empty()) out += loss_table(c);
  out += "<ul><li>max |Δ|: " + number(c.max_abs_diff, 3) + ", max relative Δ: " + number(c.max_rel_diff, 3) +
         "</li>";
  out += "<li class=\"verdict\">" + html_escape(compare_verdict(s, c)) + "</li>";
  if (!c.first_divergent.empty()) out += "<li>first divergence: " + html_escape(c.first_divergent) + "</li>";
  if (c.achievable_loss >= 0)
    out += "<li>achievable loss (the data's entropy rate): " + number(c.achievable_loss, 4) + " nats</li>";
  return out + "</ul></section>\n";
}

// What the verdict rests on: a clean result is only as strong as what was explored.
string checked_html(const ScenarioResult& s, const CheckedData& c) {
  string out = "<section class=\"checked\"><h3>What was checked</h3><table class=\"checked\"><tbody>";
  auto row = [&](const string& what, const string& value) {
    out += "<tr><th>" + html_escape(what) + "</th>" + td(value, "num") + "</tr>";
  };
  row("schedules", std::to_string(s.schedules) + (s.policy.empty() ? "" : " (" + s.policy + ")"));
  if (c.training_steps > 0) row("training steps per schedule", std::to_string(c.training_steps));
  row("scheduler steps", std::to_string(c.scheduler_steps));
  row("stream operations", std::to_string(c.operations));
  row("collectives and transfers", std::to_string(c.collectives));
  row("memory accesses checked", bytes_text(c.bytes_checked));
  if (s.trace_digest != 0) row("combined trace digest", digest_text(s.trace_digest));
  out += "</tbody></table><p class=\"detectors\">Looked for: ";
  for (size_t i = 0; i < c.detectors.size(); ++i)
    out += (i ? ", " : "") + string("<code>") + html_escape(c.detectors[i]) + "</code>";
  return out + ".</p></section>\n";
}

string scenario_html(const ScenarioResult& s, size_t i, const std::vector<string>& traces) {
  const string result = result_text(s);
  string out = "<section class=\"scenario\" id=\"scenario-" + std::to_string(i) + "\"><h2>" +
               html_escape(s.name) + " <span class=\"" + (result_class(result)) + "\">" + result +
               "</span></h2>";
  if (!s.description.empty()) out += "<p>" + html_escape(s.description) + "</p>";
  out += "<p class=\"meta\"><code>" + html_escape(s.file) + "</code> (" + html_escape(s.kind) +
         "): expected " + html_escape(s.expected) + ", found " + html_escape(kinds_text(s.found)) + "; " +
         std::to_string(s.schedules) + (s.schedules == 1 ? " schedule" : " schedules") + " in " +
         seconds_text(s.seconds) + "</p>";
  if (!s.error.empty()) out += "<pre class=\"error\">Internal error: " + html_escape(s.error) + "</pre>";
  if (!s.complete) out += "<p class=\"stopped\">Stopped early: " + html_escape(stopped_text(s)) + "</p>";
  if (s.determinism) {
    out += string("<p class=\"determinism\" data-matched=\"") + (s.determinism->matched ? "true" : "false") +
           "\">" + (s.determinism->matched ? "Determinism: " : "Nondeterministic: ") +
           html_escape(determinism_text(*s.determinism)) + "</p>";
  }
  for (size_t f = 0; f < s.findings.size(); ++f)
    out += finding_html(s, f, i, f < traces.size() ? traces[f] : "");
  if (s.checked) out += checked_html(s, *s.checked);
  if (s.compare) out += compare_html(s, *s.compare, i);
  return out + "</section>\n";
}
}  // namespace

std::string to_html(const Report& r) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      << "<title>" << html_escape(r.title) << "</title><style>" << kStyle << "</style></head>\n<body>\n";
  out << "<h1>" << html_escape(r.title) << "</h1>\n";
  if (!r.complete) {
    out << "<div class=\"banner\" id=\"incomplete\">Incomplete report: "
        << html_escape(r.incomplete_reason.empty() ? "the run did not finish" : r.incomplete_reason)
        << ". Scenarios that did not run are missing below; one cut short says so.</div>\n";
  }
  if (!r.command.empty())
    out << "<p class=\"meta\">Command: <code>" << html_escape(r.command) << "</code></p>\n";
  out << "<h2>Summary</h2>\n" << summary_table(r);
  const auto traces = trace_file_names(r);
  for (size_t i = 0; i < r.scenarios.size(); ++i) out << scenario_html(r.scenarios[i], i, traces[i]);
  out << "</body></html>\n";
  // A name or message that is not UTF-8 (the page says charset=utf-8) is shown with U+FFFD.
  return core::to_valid_utf8(out.str());
}

}  // namespace shardcheck::reports
