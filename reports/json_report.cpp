// The JSON report (schema "shardcheck-report", documented field by field in reports/README.md).
// Keys keep the documented order (ordered_json) so diffs of two reports line up.
#include <nlohmann/json.hpp>

#include "core/base/overloaded.hpp"
#include "reports/format.hpp"
#include "reports/report.hpp"

namespace shardcheck::reports {

namespace {
using nlohmann::ordered_json;

ordered_json access_json(const core::AccessSite& a) {
  return {{"rank", a.rank},         {"stream", a.stream},   {"op", a.op},
          {"step", a.step},         {"op_id", a.op_id},     {"buffer", a.buffer},
          {"lifetime", a.lifetime}, {"address", a.address}, {"byte_begin", a.byte_begin},
          {"byte_end", a.byte_end}, {"write", a.write}};
}

ordered_json race_json(const core::RaceDetail& d) {
  return {{"type", "race"},   {"first", access_json(d.first)},  {"second", access_json(d.second)},
          {"reuse", d.reuse}, {"missing_edge", d.missing_edge}, {"fixes", d.fixes}};
}

ordered_json collective_json(const core::CollectiveDetail& d) {
  ordered_json ranks = ordered_json::array();
  for (const auto& r : d.ranks) {
    ordered_json rank = {
        {"rank", r.rank}, {"stream", r.stream}, {"fingerprint", r.fingerprint}, {"tag", r.tag}};
    if (!r.origin.empty()) rank["origin"] = r.origin;
    ranks.push_back(std::move(rank));
  }
  ordered_json later = ordered_json::array();
  for (const auto& l : d.later)
    later.push_back({{"index", l.index}, {"kind", core::to_string(l.kind)}, {"what", l.what}});
  return {{"type", "collective"},
          {"group", d.group},
          {"index", d.index},
          {"ranks", std::move(ranks)},
          {"consequences", d.consequences},
          {"later", std::move(later)}};
}

ordered_json deadlock_json(const core::DeadlockDetail& d) {
  ordered_json nodes = ordered_json::array();
  for (const auto& n : d.cycle)
    nodes.push_back({{"rank", n.rank}, {"where", n.where}, {"op", n.op}, {"waits_for", n.waits_for}});
  return {{"type", "deadlock"}, {"is_cycle", d.is_cycle}, {"cycle", std::move(nodes)}};
}

ordered_json norm_json(const core::NormDetail& d) {
  ordered_json params = ordered_json::array();
  for (const auto& p : d.params) params.push_back({{"name", p.name}, {"counted", p.counted}});
  return {
      {"type", "norm"}, {"expected", d.expected}, {"reported", d.reported}, {"params", std::move(params)}};
}

ordered_json element_json(const core::ElementDetail& d) {
  return {{"type", "element"},      {"step", d.step},     {"tensor", d.tensor},
          {"element", d.element},   {"rank", d.rank},     {"other_rank", d.other_rank},
          {"expected", d.expected}, {"actual", d.actual}, {"note", d.note}};
}

ordered_json detail_json(const core::FindingDetail& detail) {
  return std::visit(core::Overloaded{
                        [](const std::monostate&) { return ordered_json(nullptr); },
                        [](const core::RaceDetail& d) { return race_json(d); },
                        [](const core::CollectiveDetail& d) { return collective_json(d); },
                        [](const core::DeadlockDetail& d) { return deadlock_json(d); },
                        [](const core::NormDetail& d) { return norm_json(d); },
                        [](const core::ElementDetail& d) { return element_json(d); },
                    },
                    detail);
}

// One code site's instances (core::Spread), null for a finding keyed otherwise.
ordered_json spread_json(const core::Spread& sp) {
  if (sp.empty()) return nullptr;
  return {{"instances", sp.instances.size()},
          {"ranks", sp.ranks},
          {"streams", sp.streams},
          {"also_seen_as", sp.symptoms}};
}

ordered_json finding_json(const ScenarioResult& s, const core::Finding& f, const std::string& trace) {
  return {{"kind", core::to_string(f.kind)},
          {"summary", f.summary},
          {"explanation", f.explanation},
          {"key", f.key},
          {"seed", f.seed},
          {"occurrences", f.occurrences},
          {"spread", spread_json(f.spread)},
          {"reproducer", reproducer(s, f)},
          {"trace", trace.empty() ? ordered_json(nullptr) : ordered_json(trace)},
          {"detail", detail_json(f.detail)}};
}

ordered_json compare_json(const CompareData& c) {
  ordered_json series = ordered_json::array();
  for (const auto& s : c.series) series.push_back({{"label", s.label}, {"losses", s.losses}});
  return {{"against", c.against},
          {"series", std::move(series)},
          {"max_abs_diff", c.max_abs_diff},
          {"max_rel_diff", c.max_rel_diff},
          {"bitwise_equal", c.bitwise_equal},
          {"first_divergent", c.first_divergent},
          {"achievable_loss", c.achievable_loss},
          {"schedule", c.schedule}};
}

ordered_json checked_json(const CheckedData& c) {
  return {{"scheduler_steps", c.scheduler_steps}, {"operations", c.operations},
          {"collectives", c.collectives},         {"bytes_checked", c.bytes_checked},
          {"training_steps", c.training_steps},   {"detectors", c.detectors}};
}

ordered_json determinism_json(const DeterminismData& d) {
  return {{"runs", d.runs}, {"matched", d.matched}, {"mismatch", d.mismatch}};
}

ordered_json scenario_json(const ScenarioResult& s, const std::vector<std::string>& traces) {
  ordered_json found = ordered_json::array();
  for (const auto k : s.found) found.push_back(core::to_string(k));
  ordered_json findings = ordered_json::array();
  for (size_t i = 0; i < s.findings.size(); ++i)
    findings.push_back(finding_json(s, s.findings[i], i < traces.size() ? traces[i] : ""));
  return {{"name", s.name},
          {"file", s.file},
          {"kind", s.kind},
          {"description", s.description},
          {"expected", s.expected},
          {"found", std::move(found)},
          {"met", s.met},
          {"judged", s.judged},
          {"partial", s.partial},
          {"schedules", s.schedules},
          {"trace_digest", digest_text(s.trace_digest)},
          {"seconds", s.seconds},
          {"error", s.error},
          {"policy", s.policy},
          {"findings", std::move(findings)},
          {"compare", s.compare ? compare_json(*s.compare) : ordered_json(nullptr)},
          {"complete", s.complete},
          {"determinism", s.determinism ? determinism_json(*s.determinism) : ordered_json(nullptr)},
          {"checked", s.checked ? checked_json(*s.checked) : ordered_json(nullptr)}};
}

}  // namespace

std::string to_json(const Report& r) {
  ordered_json scenarios = ordered_json::array();
  const auto traces = trace_file_names(r);
  for (size_t i = 0; i < r.scenarios.size(); ++i)
    scenarios.push_back(scenario_json(r.scenarios[i], traces[i]));
  const Totals t = totals(r);
  ordered_json root = {{"schema", "shardcheck-report"},
                       {"schema_version", Report::kSchemaVersion},
                       {"title", r.title},
                       {"command", r.command},
                       {"complete", r.complete},
                       {"incomplete_reason", r.incomplete_reason},
                       {"stopped", r.stopped.empty() ? ordered_json(nullptr) : ordered_json(r.stopped)},
                       {"scenarios", std::move(scenarios)},
                       {"totals",
                        {{"scenarios", t.scenarios},
                         {"met", t.met},
                         {"failed", t.failed},
                         {"no_verdict", t.no_verdict},
                         {"findings", t.findings}}}};
  // Invalid UTF-8 in a name or message must not lose the whole report: replace it (U+FFFD).
  return root.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace shardcheck::reports
