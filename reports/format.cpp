// Escaping, number formatting and totals shared by the Markdown, HTML and JSON renderers.
#include "reports/format.hpp"

#include "core/base/text.hpp"
#include "core/scenario/expectation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

namespace shardcheck::reports {

std::string_view markup_entity(char c, bool apostrophe) {
  switch (c) {
    case '&':
      return "&amp;";
    case '<':
      return "&lt;";
    case '>':
      return "&gt;";
    case '"':
      return "&quot;";
    case '\'':
      return apostrophe ? "&#39;" : "";
    default:
      return "";
  }
}

std::string html_escape(std::string_view s) {
  // Control and invisible format characters as the terminal shows them (\x1b, \u202e): a
  // browser would reorder a line around a bidirectional override, or hide a zero-width space.
  // Bytes that are not UTF-8 show as U+FFFD (the page says charset=utf-8).
  const std::string text = core::printable_lines(core::to_valid_utf8(s));
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (const char c : text) {
    const std::string_view e = markup_entity(c, true);
    if (e.empty()) {
      out += c;
    } else {
      out += e;
    }
  }
  return out;
}

namespace {
// The length of what would open a block at the start of a line: a heading's '#', a list's
// '-', '+' or "12." / "12)", a setext underline's '='; 0 when nothing would.
size_t block_marker(std::string_view s) {
  if (s.empty()) return 0;
  if (s[0] == '#' || s[0] == '-' || s[0] == '+' || s[0] == '=') return 1;
  const size_t digits = s.find_first_not_of("0123456789");
  if (digits > 0 && digits != std::string_view::npos && (s[digits] == '.' || s[digits] == ')'))
    return digits + 1;
  return 0;
}
}  // namespace

std::string md_text(std::string_view s) {
  // Line breaks first become spaces (prose stays on its line), then every other control or
  // invisible character is written as the terminal shows it.
  std::string flat(s);
  std::replace_if(
      flat.begin(), flat.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  const std::string text = core::printable(core::to_valid_utf8(flat));
  std::string out;
  const size_t marker = block_marker(text);
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool markup = std::string_view("\\`*[]<>").find(c) != std::string_view::npos;
    if (markup || (marker > 0 && i == marker - 1)) out += '\\';
    out += c;
  }
  return out;
}

std::string md_cell(std::string_view s) {
  std::string out;
  for (const char c : md_text(s)) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out.empty() ? " " : out;
}

namespace {
size_t longest_backtick_run(std::string_view s) {
  size_t longest = 0, run = 0;
  for (const char c : s) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}
}  // namespace

std::string md_fence(std::string_view s) {
  return std::string(std::max<size_t>(3, longest_backtick_run(s) + 1), '`');
}

std::string md_code(std::string_view s) {
  // A code span shows its text literally, so escaping inside it is printable's alone: no line
  // break can end the span and start a heading on the next line.
  const std::string text = core::printable(core::to_valid_utf8(s));
  const std::string ticks(longest_backtick_run(text) + 1, '`');
  const std::string pad = ticks.size() > 1 ? " " : "";
  return ticks + pad + text + pad + ticks;
}

std::string number(double v, int digits) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", std::clamp(digits, 1, 17), v);
  return buf;
}

std::string digest_text(uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

std::string seconds_text(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f s", seconds);
  return buf;
}

size_t char_count(std::string_view s) {
  size_t count = 0;
  for (const char c : s)
    count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // skip UTF-8 continuation bytes
  return count;
}

std::string truncate(std::string_view s, size_t chars) {
  if (char_count(s) <= chars) return std::string(s);
  if (chars == 0) return "";
  size_t count = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;
    if (count == chars - 1) return std::string(s.substr(0, i)) + "…";
    ++count;
  }
  return std::string(s);
}

// The terminal's word (core::kinds_to_string), so every output says "clean" alike.
std::string kinds_text(const std::vector<core::FindingKind>& kinds) { return core::kinds_to_string(kinds); }
namespace {
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}
}  // namespace

std::string cut_text(const core::TraceLog& log) {
  if (log.cut.dropped_before == 0 && log.cut.dropped_after == 0) return "";
  return "it holds " + std::to_string(log.slices.size()) + " of the run's " +
         std::to_string(log.cut.slices_total) + " slices (" + log.cut.why + ")";
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

std::string bytes_text(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1000 && u + 1 < std::size(kUnits)) v /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string checked_text(const ScenarioResult& s, const CheckedData& c) {
  std::string out = grouped(s.schedules) + (s.schedules == 1 ? " schedule" : " schedules");
  if (c.training_steps > 0)
    out += " of " + grouped(c.training_steps) +
           (c.training_steps == 1 ? " training step" : " training steps") + (s.schedules == 1 ? "" : " each");
  out += ": " + grouped(c.scheduler_steps) + " scheduler steps, " + grouped(c.operations) +
         " stream operations, " + grouped(c.collectives) +
         (c.collectives == 1 ? " collective" : " collectives") + " or transfers, " +
         bytes_text(c.bytes_checked) + " of memory accesses checked";
  return out;
}

std::string compare_verdict(const ScenarioResult& s, const CompareData& c) {
  std::string out =
      std::string("weights bitwise equal after the last step: ") + (c.bitwise_equal ? "yes" : "no");
  if (!c.schedule.empty()) out += ", on schedule " + c.schedule;
  const bool divergence_found =
      std::find(s.found.begin(), s.found.end(), core::FindingKind::numerics_divergence) != s.found.end();
  if (c.bitwise_equal && divergence_found)
    out +=
        ". The numerics_divergence above is not visible in these weights: it was found on another schedule "
        "or in other tensors (its explanation says which), and this run did not reproduce it";
  return out;
}

std::string result_text(const ScenarioResult& s) {
  if (!s.judged && s.error.empty()) return kNoVerdict;
  // A captured program states no expectation: it is clean, has findings, or stopped partway
  // (as the terminal's verdict says).
  if (s.kind == "capture" && s.error.empty()) {
    if (!s.partial.empty()) return "PARTIAL";
    return s.found.empty() ? "clean" : "FOUND";
  }
  return s.met && s.error.empty() ? "ok" : "FAILED";
}

std::string stopped_text(const ScenarioResult& s) {
  if (s.schedules == 0) return "before its first schedule finished: nothing was judged";
  return "after " + std::to_string(s.schedules) + (s.schedules == 1 ? " schedule" : " schedules") +
         "; those that ran are judged here, the rest did not run";
}

std::string determinism_text(const DeterminismData& d) {
  const std::string rerun =
      std::to_string(d.runs) + (d.runs == 1 ? " schedule" : " schedules") + " rerun with the same seeds";
  if (d.matched) return rerun + ": every trace digest and finding repeated";
  return rerun + ": " + d.mismatch + ". shardcheck itself is at fault: a seed must repeat exactly";
}

Totals totals(const Report& r) {
  Totals t;
  for (const auto& s : r.scenarios) {
    ++t.scenarios;
    const std::string result = result_text(s);
    if (result == "ok" || result == "clean")
      ++t.met;
    else if (result == kNoVerdict)
      ++t.no_verdict;
    else
      ++t.failed;
    t.findings += static_cast<int>(s.findings.size());
  }
  return t;
}

std::string totals_text(const Totals& t) {
  return std::to_string(t.scenarios) + (t.scenarios == 1 ? " scenario: " : " scenarios: ") +
         std::to_string(t.met) + " met expectations, " + std::to_string(t.failed) + " failed" +
         (t.no_verdict > 0
              ? ", " + std::to_string(t.no_verdict) + " stopped before a schedule finished (no verdict)"
              : std::string()) +
         "; " + std::to_string(t.findings) + (t.findings == 1 ? " finding" : " findings");
}

size_t compare_steps(const CompareData& c) {
  size_t n = 0;
  for (const auto& s : c.series) n = std::max(n, s.losses.size());
  return n;
}

StepDelta step_delta(const CompareData& c, size_t step) {
  StepDelta d;
  double lo = 0, hi = 0, mag = 0;
  int seen = 0;
  bool nan = false;
  for (const auto& s : c.series) {
    if (step >= s.losses.size()) continue;
    const double v = s.losses[step];
    nan = nan || std::isnan(v);
    lo = seen == 0 ? v : std::min(lo, v);
    hi = seen == 0 ? v : std::max(hi, v);
    mag = std::max(mag, std::fabs(v));
    ++seen;
  }
  if (seen < 2) return d;
  d.present = true;
  if (nan) {  // min/max would silently skip a NaN; a NaN loss is the largest difference there is
    d.abs = d.rel = std::nan("");
    return d;
  }
  d.abs = hi - lo;
  d.rel = mag > 0 ? d.abs / mag : 0;
  return d;
}

}  // namespace shardcheck::reports
