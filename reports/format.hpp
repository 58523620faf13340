// Text helpers the renderers share: escaping for HTML and Markdown, number formatting, and
// the totals every report prints. Internal to reports/.
//   html_escape("a<b") == "a&lt;b";  number(7.0710678) == "7.071068"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/check/findings.hpp"
#include "reports/report_model.hpp"

namespace shardcheck::reports {

// Markup entities for & < > " ', and control and invisible format characters as
// core::printable_lines writes them (line breaks kept).
std::string html_escape(std::string_view s);
// The entity markup writes for c (&, <, >, ", and ' where `apostrophe`), or "" for any other.
std::string_view markup_entity(char c, bool apostrophe);
// Markdown prose on one line: line breaks turned into spaces, control and invisible format
// characters as core::printable writes them, characters that would start markup (\ ` * [ ] < >)
// escaped, and so is what would open a block at the start of a line (# - + = "1.").
std::string md_text(std::string_view s);
// A Markdown table cell: md_text with '|' escaped too.
std::string md_cell(std::string_view s);
// Inline code: `s` as core::printable writes it (no line break can end the span), with a
// longer backtick run when `s` holds backticks itself.
std::string md_code(std::string_view s);
// A fence (``` or longer) that does not occur in `s`, so `s` can sit in a code block verbatim.
std::string md_fence(std::string_view s);

// Up to `digits` significant digits, no trailing noise; "NaN", "inf", "-inf" for the rest.
std::string number(double v, int digits = 7);
std::string seconds_text(double seconds);  // "0.12 s"
// A 64-bit digest as 16 lower-case hex digits, zero-padded: "00ab...".
std::string digest_text(uint64_t digest);
// Characters (UTF-8 code points) in `s`.
size_t char_count(std::string_view s);
// `s` cut to at most `chars` characters, the last of them "…" when it was cut.
std::string truncate(std::string_view s, size_t chars);

std::string kinds_text(const std::vector<core::FindingKind>& kinds);  // "a, b" or "clean"
std::string result_text(const ScenarioResult& s);                     // "ok", "FAILED" or kNoVerdict
// A scenario cut short: "after 12 schedules; those that ran are judged, the rest did not run".
std::string stopped_text(const ScenarioResult& s);
// "20 schedules rerun with the same seeds: every trace digest matched", or the mismatch.
std::string determinism_text(const DeterminismData& d);
// What the runs covered, one line: "200 schedules of 3 training steps each: 41,230 scheduler
// steps, 12,004 stream operations, 1,800 collectives, 3.1 MB of memory accesses checked".
std::string checked_text(const ScenarioResult& s, const CheckedData& c);
std::string bytes_text(int64_t bytes);
// How much of the run a finding's timeline shows: "" when all of it, else "it holds 4000 of
// the run's 10520 slices (…why)".
std::string cut_text(const core::TraceLog& log);
std::string join(const std::vector<std::string>& items,
                 std::string_view sep = ", ");  // "512 B", "3.1 KB", "2.4 MB", "1.2 GB"
// The compare section's verdict on the weights, in words that agree with the findings above
// it: which schedule ran, and when its weights match although a numerics_divergence was found,
// that the two speak of different runs or different weights.
std::string compare_verdict(const ScenarioResult& s, const CompareData& c);

struct Totals {
  int scenarios = 0;
  int met = 0;
  int failed = 0;
  int no_verdict = 0;  // stopped before a schedule finished (ScenarioResult::judged false)
  int findings = 0;
};
// result_text of a scenario that was never judged.
inline constexpr const char* kNoVerdict = "stopped, no verdict";
Totals totals(const Report& r);
std::string totals_text(const Totals& t);  // "3 scenarios: 2 met expectations, 1 failed; 4 findings"

// Per-step spread of a compare result's series: max |a - b| over pairs, and that relative to
// the largest magnitude. `present` is false at steps fewer than two series reach.
struct StepDelta {
  bool present = false;
  double abs = 0;
  double rel = 0;
};
StepDelta step_delta(const CompareData& c, size_t step);
size_t compare_steps(const CompareData& c);  // the longest series' length

}  // namespace shardcheck::reports
