// Chrome trace rendering with nlohmann::json.
#include "reports/chrome_trace.hpp"

#include <map>
#include <nlohmann/json.hpp>

#include "core/base/overloaded.hpp"

namespace shardcheck::reports {

namespace {
using nlohmann::ordered_json;

int tid_of(const core::TraceLog& log, int rank, const std::string& thread) {
  for (const auto& t : log.threads) {
    if (t.rank == rank && t.name == thread) return t.tid;
  }
  return 0;
}

void instant(ordered_json& events, int rank, int tid, int64_t ts, const std::string& name,
             const std::string& detail) {
  events.push_back({{"name", name},
                    {"cat", "finding"},
                    {"ph", "i"},
                    {"s", "t"},
                    {"ts", ts},
                    {"pid", rank},
                    {"tid", tid},
                    {"args", {{"finding", detail}}}});
}

void finding_events(ordered_json& events, const core::TraceLog& log, const core::Finding& f, int flow_id) {
  const std::string kind(core::to_string(f.kind));
  std::visit(core::Overloaded{
                 [&](const core::RaceDetail& d) {
                   const int t1 = tid_of(log, d.first.rank, d.first.stream),
                             t2 = tid_of(log, d.second.rank, d.second.stream);
                   events.push_back({{"name", "race"},
                                     {"cat", "race"},
                                     {"ph", "s"},
                                     {"id", flow_id},
                                     {"ts", d.first.step},
                                     {"pid", d.first.rank},
                                     {"tid", t1}});
                   events.push_back({{"name", "race"},
                                     {"cat", "race"},
                                     {"ph", "f"},
                                     {"bp", "e"},
                                     {"id", flow_id},
                                     {"ts", d.second.step},
                                     {"pid", d.second.rank},
                                     {"tid", t2}});
                   instant(events, d.second.rank, t2, d.second.step, kind, f.summary);
                 },
                 [&](const core::DeadlockDetail& d) {
                   int64_t last = 0;
                   for (const auto& s : log.slices) last = std::max(last, s.ts_us + s.dur_us);
                   for (const auto& n : d.cycle)
                     instant(events, n.rank, tid_of(log, n.rank, n.where), last, kind,
                             n.op + " waits for " + n.waits_for);
                 },
                 [&](const core::CollectiveDetail& d) {
                   for (const auto& r : d.ranks)
                     instant(events, r.rank, tid_of(log, r.rank, r.stream), 0, kind,
                             r.tag + " [" + r.fingerprint + "]");
                 },
                 [&](const auto&) { instant(events, 0, 0, 0, kind, f.summary); },
             },
             f.detail);
}
}  // namespace

std::string chrome_trace(const core::TraceLog& log, const std::vector<core::Finding>& findings) {
  ordered_json events = ordered_json::array();
  for (int r = 0; r < log.ranks; ++r) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", r},
                      {"args", {{"name", "rank " + std::to_string(r)}}}});
    events.push_back(
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r}, {"args", {{"sort_index", r}}}});
  }
  for (const auto& t : log.threads) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", t.rank},
                      {"tid", t.tid},
                      {"args", {{"name", t.name}}}});
    events.push_back({{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", t.rank},
                      {"tid", t.tid},
                      {"args", {{"sort_index", t.tid}}}});
  }
  for (const auto& s : log.slices) {
    events.push_back({{"name", s.name},
                      {"cat", s.category},
                      {"ph", "X"},
                      {"ts", s.ts_us},
                      {"dur", s.dur_us},
                      {"pid", s.rank},
                      {"tid", s.tid},
                      {"args", {{"op", s.op}}}});
  }
  int flow = 1;
  for (const auto& f : findings) finding_events(events, log, f, flow++);
  ordered_json root;
  root["traceEvents"] = std::move(events);
  root["displayTimeUnit"] = "ns";
  root["otherData"] = {{"title", log.title}, {"time", "one microsecond per scheduler step"}};
  // JSON strings are UTF-8: a kernel, stream or buffer name that is not must still give a
  // trace (U+FFFD in its place), never an exception that loses the trace and the report.
  return root.dump(1, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace shardcheck::reports
