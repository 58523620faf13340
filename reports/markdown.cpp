// The Markdown report: a summary table, then each scenario with its findings (explanation and
// reproducer in code blocks) and, for a compare run, a per-step loss table.
#include <sstream>

#include "core/base/text.hpp"
#include "reports/format.hpp"
#include "reports/report.hpp"

namespace shardcheck::reports {

namespace {

// Text in a fenced block shows literally; its control characters are escaped as on the terminal
// and its fence is longer than any backtick run inside, so nothing in it can close the block.
void code_block(std::ostringstream& out, std::string_view lang, const std::string& raw) {
  const std::string text = core::printable_lines(core::to_valid_utf8(raw));
  const std::string fence = md_fence(text);
  out << fence << lang << "\n"
      << text << (text.empty() || text.back() != '\n' ? "\n" : "") << fence << "\n\n";
}

void summary_table(std::ostringstream& out, const Report& r) {
  out << "| scenario | expected | found | schedules explored | time | result |\n";
  out << "|---|---|---|---:|---:|---|\n";
  for (const auto& s : r.scenarios) {
    const std::string result = result_text(s);
    out << "| " << md_cell(s.name) << " | " << md_cell(s.expected) << " | " << md_cell(kinds_text(s.found))
        << " | " << s.schedules << " | " << seconds_text(s.seconds) << " | "
        << (result == "FAILED" || result == "FOUND" || result == "PARTIAL" ? "**" + result + "**" : result)
        << " |\n";
  }
  out << "\n" << totals_text(totals(r)) << ".\n\n";
}

void loss_table(std::ostringstream& out, const CompareData& c) {
  out << "| step |";
  for (const auto& s : c.series) out << " " << md_cell(s.label) << " |";
  out << " max \\|Δ\\| | relative Δ |\n|---:|";
  for (size_t i = 0; i < c.series.size(); ++i) out << "---:|";
  out << "---:|---:|\n";
  const size_t steps = compare_steps(c);
  for (size_t step = 0; step < steps; ++step) {
    out << "| " << step << " |";
    for (const auto& s : c.series)
      out << " " << (step < s.losses.size() ? number(s.losses[step]) : "—") << " |";
    const StepDelta d = step_delta(c, step);
    out << " " << (d.present ? number(d.abs, 3) : "—") << " | " << (d.present ? number(d.rel, 3) : "—")
        << " |\n";
  }
  out << "\n";
}

void compare_section(std::ostringstream& out, const ScenarioResult& s, const CompareData& c) {
  out << "### Compare against " << md_text(c.against) << "\n\n";
  if (!c.series.empty()) loss_table(out, c);
  out << "- max |Δ|: " << number(c.max_abs_diff, 3) << ", max relative Δ: " << number(c.max_rel_diff, 3)
      << "\n";
  out << "- " << md_text(compare_verdict(s, c)) << "\n";
  if (!c.first_divergent.empty()) out << "- first divergence: " << md_text(c.first_divergent) << "\n";
  if (c.achievable_loss >= 0)
    out << "- achievable loss (the data's entropy rate): " << number(c.achievable_loss, 4) << " nats\n";
  out << "\n";
}

// What the verdict rests on: a clean result is only as strong as what was explored.
void checked_section(std::ostringstream& out, const ScenarioResult& s, const CheckedData& c) {
  out << "### What was checked\n\n";
  out << "- " << md_text(checked_text(s, c)) << "\n";
  if (!s.policy.empty()) out << "- schedule policy: " << md_text(s.policy) << "\n";
  out << "- looked for: " << md_text(join(c.detectors)) << "\n";
  if (s.trace_digest != 0) out << "- combined trace digest: " << md_code(digest_text(s.trace_digest)) << "\n";
  out << "\n";
}

void finding_section(std::ostringstream& out, const ScenarioResult& s, size_t i,
                     const std::string& trace_file) {
  const core::Finding& f = s.findings[i];
  out << "### " << core::to_string(f.kind) << ": " << md_text(f.summary) << "\n\n";
  out << "Seed " << f.seed << ", seen " << f.occurrences << (f.occurrences == 1 ? " time" : " times") << ".";
  if (!trace_file.empty()) {
    out << " Timeline: " << md_code(trace_file) << " (Chrome trace; Perfetto opens it)";
    const std::string cut = i < s.finding_traces.size() ? cut_text(s.finding_traces[i]) : "";
    out << (cut.empty() ? "" : "; " + md_text(cut)) << ".";
  }
  out << "\n\n";
  if (!f.explanation.empty()) code_block(out, "text", f.explanation + "\n" + core::spread_text(f));
  out << "Reproduce:\n\n";
  code_block(out, "sh", reproducer(s, f));
}

void scenario_section(std::ostringstream& out, const ScenarioResult& s,
                      const std::vector<std::string>& traces) {
  out << "## " << md_text(s.name) << " (" << result_text(s) << ")\n\n";
  if (!s.description.empty()) out << md_text(s.description) << "\n\n";
  out << md_code(s.file) << " (" << md_text(s.kind) << "): expected " << md_text(s.expected) << ", found "
      << kinds_text(s.found) << "; " << s.schedules << (s.schedules == 1 ? " schedule" : " schedules")
      << " in " << seconds_text(s.seconds) << ".\n\n";
  if (!s.error.empty()) out << "**Internal error:** " << md_text(s.error) << "\n\n";
  if (!s.partial.empty())
    out << "**Partial capture** (not every rank finished, so it is not clean): " << md_text(s.partial)
        << "\n\n";
  if (!s.complete) out << "**Stopped early:** " << md_text(stopped_text(s)) << "\n\n";
  if (s.determinism)
    out << (s.determinism->matched ? "Determinism: " : "**Nondeterministic:** ")
        << md_text(determinism_text(*s.determinism)) << "\n\n";
  for (size_t i = 0; i < s.findings.size(); ++i)
    finding_section(out, s, i, i < traces.size() ? traces[i] : "");
  if (s.checked) checked_section(out, s, *s.checked);
  if (s.compare) compare_section(out, s, *s.compare);
}

}  // namespace

std::string to_markdown(const Report& r) {
  std::ostringstream out;
  out << "# " << md_text(r.title) << "\n\n";
  if (!r.complete) {
    out << "> **Incomplete report:** "
        << md_text(r.incomplete_reason.empty() ? "the run did not finish" : r.incomplete_reason)
        << ". Scenarios that did not run are missing below; one cut short says so.\n\n";
  }
  if (!r.command.empty()) out << "Command: " << md_code(r.command) << "\n\n";
  out << "## Summary\n\n";
  summary_table(out, r);
  const auto traces = trace_file_names(r);
  for (size_t i = 0; i < r.scenarios.size(); ++i) scenario_section(out, r.scenarios[i], traces[i]);
  // Markdown is read as UTF-8: a name or message that is not is shown with U+FFFD.
  return core::to_valid_utf8(out.str());
}

}  // namespace shardcheck::reports
