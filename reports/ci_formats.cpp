// JUnit XML and SARIF 2.1.0 from a report: test cases per scenario file, results per finding.
#include "reports/ci_formats.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/base/text.hpp"
#include "reports/format.hpp"

namespace shardcheck::reports {

namespace {

// What each finding kind means, for SARIF's rules: the kind table's sentence.
std::string_view rule_text(core::FindingKind k) { return core::info(k).meaning; }

// "stream_race" -> "StreamRace": SARIF's rule names are identifiers.
std::string rule_name(std::string_view id) {
  std::string out;
  bool upper = true;
  for (const char c : id) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(c - 'a' + 'A') : c;
    upper = false;
  }
  return out;
}

// A relative path as a URI reference (RFC 3986): unreserved characters and '/' as they are,
// every other byte percent-encoded; an absolute path as a file:// URI.
std::string path_uri(const std::string& path) {
  std::string out = path.rfind('/', 0) == 0 ? "file://" : "";
  for (const char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out += c;
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", u);
      out += buf;
    }
  }
  return out;
}

// FNV-1a, 64 bits: a fingerprint that stays the same across machines and builds.
std::string fingerprint(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return digest_text(h);
}

std::string utf8(std::string_view s) { return core::to_valid_utf8(s); }
// A message a CI server shows: a name from an input in it must not reorder or hide what follows
// (bidi overrides, zero-width characters) or draw on a terminal, as on every other output.
std::string shown(std::string_view s) { return core::printable_lines(s); }

const FindingPlace* place_of(const CiInput& in, size_t scenario, size_t finding) {
  if (scenario >= in.places.size() || finding >= in.places[scenario].size()) return nullptr;
  return &in.places[scenario][finding];
}

bool stated(const CiInput& in, size_t scenario) {
  return scenario >= in.stated.size() || in.stated[scenario];
}

// The findings as the terminal prints them: explanation, count, reproducer.
std::string findings_text(const ScenarioResult& s) {
  std::string out;
  for (const auto& f : s.findings) {
    out += "[" + std::string(core::to_string(f.kind)) + "] " + f.explanation + "\n";
    if (f.occurrences > 1)
      out += "  (seen " + std::to_string(f.occurrences) + " times: on several ranks, steps or schedules)\n";
    out += core::spread_text(f);
    out += "  reproduce: " + reproducer(s, f) + "\n\n";
  }
  return out;
}

std::string attr(std::string_view name, std::string_view value) {
  return " " + std::string(name) + "=\"" + xml_escape(value) + "\"";
}

std::string seconds_attr(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", seconds);
  return attr("time", buf);
}

std::string testcase_xml(const CiInput& in, size_t i) {
  const ScenarioResult& s = in.report.scenarios[i];
  std::string x = "    <testcase" + attr("name", s.name) + attr("classname", "shardcheck." + s.kind) +
                  attr("file", s.file) + seconds_attr(s.seconds) + ">\n";
  if (!s.error.empty()) {
    x += "      <error" + attr("message", "internal error: " + s.error) + attr("type", "internal_error") +
         "/>\n";
  } else if (!s.judged) {
    x += "      <skipped" + attr("message", "stopped before a schedule finished: no verdict") + "/>\n";
  } else if (!s.met) {
    const std::string message = stated(in, i) ? "expected " + s.expected + ", found " + kinds_text(s.found)
                                              : "found " + kinds_text(s.found);
    x += "      <failure" + attr("message", message) +
         attr("type", stated(in, i) ? "expectation_not_met" : "findings") + ">" +
         xml_escape(findings_text(s)) + "</failure>\n";
  }
  std::string out = "schedules: " + std::to_string(s.schedules) + "\nfound: " + kinds_text(s.found) + "\n";
  if (!s.complete) out += "incomplete: " + stopped_text(s) + "\n";
  if (s.met && !s.findings.empty()) out += "\n" + findings_text(s);
  x += "      <system-out>" + xml_escape(out) + "</system-out>\n";
  return x + "    </testcase>\n";
}

nlohmann::json physical(const SourceSpot& spot) {
  return {{"physicalLocation",
           {{"artifactLocation", {{"uri", utf8(path_uri(spot.file))}}},
            {"region", {{"startLine", std::max(1, spot.line)}}}}}};
}

nlohmann::json result_json(const CiInput& in, size_t i, size_t j) {
  const ScenarioResult& s = in.report.scenarios[i];
  const core::Finding& f = s.findings[j];
  const FindingPlace* p = place_of(in, i, j);
  const SourceSpot at = p ? p->at : SourceSpot{s.file, 1, ""};
  nlohmann::json r = {
      {"ruleId", std::string(core::to_string(f.kind))},
      {"ruleIndex", static_cast<int>(f.kind)},
      {"level", "error"},
      {"message", {{"text", shown(f.explanation.empty() ? f.summary : f.explanation)}}},
      {"locations", nlohmann::json::array({physical(at)})},
      {"partialFingerprints", {{"shardcheckFinding/v1", fingerprint(s.file + "\n" + f.key)}}},
      {"properties",
       {{"scenario", shown(s.name)},
        {"scenarioFile", shown(s.file)},
        {"seed", f.seed},
        {"occurrences", f.occurrences},
        {"reproduce", utf8(reproducer(s, f))}}},
  };
  if (p && !p->related.empty()) {
    nlohmann::json related = nlohmann::json::array();
    for (size_t k = 0; k < p->related.size(); ++k) {
      nlohmann::json loc = physical(p->related[k]);
      loc["id"] = k + 1;
      if (!p->related[k].note.empty()) loc["message"] = {{"text", shown(p->related[k].note)}};
      related.push_back(std::move(loc));
    }
    r["relatedLocations"] = std::move(related);
  }
  if (p && p->expected) {
    r["suppressions"] =
        nlohmann::json::array({{{"kind", "inSource"},
                                {"justification", utf8("listed under expect: in " + s.file +
                                                       ": the scenario is meant to show it")}}});
  }
  return r;
}

nlohmann::json notifications(const CiInput& in) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& n : in.not_run) {
    out.push_back({{"level", n.error ? "error" : "note"},
                   {"message", {{"text", shown(n.reason)}}},
                   {"locations", nlohmann::json::array({physical({n.file, 1, ""})})}});
  }
  for (const auto& s : in.report.scenarios) {
    if (s.error.empty()) continue;
    out.push_back({{"level", "error"},
                   {"message", {{"text", shown(s.name + ": internal error: " + s.error)}}},
                   {"locations", nlohmann::json::array({physical({s.file, 1, ""})})}});
  }
  if (!in.report.complete) {
    out.push_back(
        {{"level", "warning"}, {"message", {{"text", shown("incomplete: " + in.report.incomplete_reason)}}}});
  }
  return out;
}

}  // namespace

std::string xml_escape(std::string_view s) {
  // XML 1.0 allows tab, line feed, carriage return and U+0020-U+D7FF, U+E000-U+FFFD and
  // U+10000-U+10FFFF. Bytes that are not UTF-8 (lone surrogates among them) become U+FFFD; the
  // other characters XML refuses, and those a CI page would act on rather than show (C1, bidi
  // overrides, zero-width), are written as the terminal shows them: \x1b, \ufffe, \u202e.
  const std::string text = core::to_valid_utf8(s);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const core::Utf8Sequence seq = core::utf8_sequence_at(text, i);
    const char32_t c = seq.code_point;
    const bool kept = c == '\t' || c == '\n' || c == '\r';
    if (const std::string_view e = markup_entity(text[i], false); !e.empty()) {
      out += e;
    } else if (!kept && (core::is_control(c) || core::is_invisible_format(c) || c == 0xFFFE || c == 0xFFFF)) {
      char buf[16];
      std::snprintf(buf, sizeof buf, c < 0x80 ? "\\x%02x" : "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out.append(text, i, seq.length);
    }
    i += seq.length;
  }
  return out;
}

std::string junit_xml(const CiInput& in) {
  const Report& r = in.report;
  int failures = 0, errors = 0, skipped = 0;
  double seconds = 0;
  for (const auto& s : r.scenarios) {
    errors += s.error.empty() ? 0 : 1;
    failures += s.error.empty() && s.judged && !s.met ? 1 : 0;
    skipped += s.error.empty() && !s.judged ? 1 : 0;
    seconds += s.seconds;
  }
  for (const auto& n : in.not_run) (n.error ? errors : skipped) += 1;
  const int tests = static_cast<int>(r.scenarios.size() + in.not_run.size());
  const std::string counts = attr("tests", std::to_string(tests)) +
                             attr("failures", std::to_string(failures)) +
                             attr("errors", std::to_string(errors)) +
                             attr("skipped", std::to_string(skipped)) + seconds_attr(seconds);
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites" + attr("name", "shardcheck") +
                  counts + ">\n  <testsuite" + attr("name", r.title) + counts + ">\n    <properties>\n" +
                  "      <property" + attr("name", "command") + attr("value", r.command) + "/>\n" +
                  "      <property" + attr("name", "complete") +
                  attr("value", r.complete ? "true" : "false") + "/>\n";
  if (!r.complete) {
    x += "      <property" + attr("name", "stopped") + attr("value", r.stopped + ": " + r.incomplete_reason) +
         "/>\n";
  }
  x += "    </properties>\n";
  for (size_t i = 0; i < r.scenarios.size(); ++i) x += testcase_xml(in, i);
  for (const auto& n : in.not_run) {
    x += "    <testcase" + attr("name", n.file) + attr("classname", "shardcheck") + attr("file", n.file) +
         attr("time", "0") + ">\n      <" + (n.error ? "error" : "skipped") + attr("message", n.reason) +
         (n.error ? attr("type", "bad_input") : "") + "/>\n    </testcase>\n";
  }
  return x + "  </testsuite>\n</testsuites>\n";
}

std::string sarif_json(const CiInput& in, const std::string& tool_version) {
  nlohmann::json rules = nlohmann::json::array();
  for (int k = 0; k < core::kFindingKinds; ++k) {
    const auto kind = static_cast<core::FindingKind>(k);
    const std::string id(core::to_string(kind));
    rules.push_back({{"id", id},
                     {"name", rule_name(id)},
                     {"shortDescription", {{"text", id}}},
                     {"fullDescription", {{"text", rule_text(kind)}}},
                     {"defaultConfiguration", {{"level", "error"}}}});
  }
  nlohmann::json results = nlohmann::json::array();
  bool errors = !in.report.complete;
  for (size_t i = 0; i < in.report.scenarios.size(); ++i) {
    errors = errors || !in.report.scenarios[i].error.empty();
    for (size_t j = 0; j < in.report.scenarios[i].findings.size(); ++j)
      results.push_back(result_json(in, i, j));
  }
  for (const auto& n : in.not_run) errors = errors || n.error;
  nlohmann::json invocation = {{"executionSuccessful", !errors},
                               {"commandLine", utf8(in.report.command)},
                               {"toolExecutionNotifications", notifications(in)}};
  const nlohmann::json sarif = {
      {"$schema", "https://json.schemastore.org/sarif-2.1.0.json"},
      {"version", "2.1.0"},
      {"runs",
       nlohmann::json::array(
           {{{"tool", {{"driver", {{"name", "shardcheck"}, {"version", tool_version}, {"rules", rules}}}}},
             {"invocations", nlohmann::json::array({invocation})},
             {"results", results}}})},
  };
  return sarif.dump(2) + "\n";
}

}  // namespace shardcheck::reports
