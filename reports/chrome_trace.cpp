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

// The slice of `op` on its stream, else its issue on the host.
const core::TraceLog::Slice* op_slice(const core::TraceLog& log, int64_t op) {
  const core::TraceLog::Slice* issue = nullptr;
  for (const auto& s : log.slices) {
    if (s.op != op) continue;
    if (s.tid > 0) return &s;
    if (!issue) issue = &s;
  }
  return issue;
}

// A collective's call on `rank`: the k-th of its group, run or (when it never ran) issued.
const core::TraceLog::Slice* collective_slice(const core::TraceLog& log, int rank, const std::string& group,
                                              int64_t k) {
  const core::TraceLog::Slice* issue = nullptr;
  for (const auto& s : log.slices) {
    if (s.rank != rank || s.seq != k || s.group != group) continue;
    if (s.tid > 0) return &s;
    if (!issue) issue = &s;
  }
  return issue;
}

std::optional<TracePlace> at_slice(const core::TraceLog::Slice* s) {
  if (!s) return std::nullopt;
  return TracePlace{s->rank, s->tid, s->ts_us};
}

// The end of training step `step` on `rank` (the start of the run for step -1).
std::optional<TracePlace> step_place(const core::TraceLog& log, int rank, int step) {
  if (step < 0) {
    for (const auto& s : log.slices) {
      if (s.rank == rank) return TracePlace{rank, s.tid, s.ts_us};
    }
    return std::nullopt;
  }
  const std::string name = core::step_end_mark(step);
  for (const auto& m : log.marks) {
    if (m.rank == rank && m.name == name) return TracePlace{rank, 0, m.ts_us};
  }
  return std::nullopt;
}

// The last slice of a thread: where a deadlocked stream or host stopped.
std::optional<TracePlace> last_on(const core::TraceLog& log, int rank, int tid) {
  std::optional<TracePlace> p;
  for (const auto& s : log.slices) {
    if (s.rank == rank && s.tid == tid) p = TracePlace{rank, tid, s.ts_us};
  }
  return p;
}

void instant(ordered_json& events, const TracePlace& p, const std::string& name, const std::string& detail) {
  events.push_back({{"name", name},
                    {"cat", "finding"},
                    {"ph", "i"},
                    {"s", "t"},
                    {"ts", p.ts_us},
                    {"pid", p.rank},
                    {"tid", p.tid},
                    {"args", {{"finding", detail}}}});
}

void race_events(ordered_json& events, const core::TraceLog& log, const core::RaceDetail& d,
                 const core::Finding& f, int flow_id) {
  const int t1 = tid_of(log, d.first.rank, d.first.stream), t2 = tid_of(log, d.second.rank, d.second.stream);
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
  instant(events, {d.second.rank, t2, d.second.step}, std::string(core::to_string(f.kind)), f.summary);
}

// Every place a finding is shown: one per rank for a collective or a deadlock, else one.
std::vector<std::pair<TracePlace, std::string>> places(const core::TraceLog& log, const core::Finding& f) {
  std::vector<std::pair<TracePlace, std::string>> out;
  if (const auto* d = std::get_if<core::CollectiveDetail>(&f.detail)) {
    for (const auto& r : d->ranks) {
      if (auto p = at_slice(collective_slice(log, r.rank, d->group, d->index)))
        out.emplace_back(*p, r.tag + " [" + r.fingerprint + "]");
    }
  } else if (const auto* dl = std::get_if<core::DeadlockDetail>(&f.detail)) {
    for (const auto& n : dl->cycle) {
      if (auto p = last_on(log, n.rank, tid_of(log, n.rank, n.where)))
        out.emplace_back(*p, n.op + " waits for " + n.waits_for);
    }
  }
  if (out.empty()) {
    if (auto p = finding_place(log, f)) out.emplace_back(*p, f.summary);
  }
  return out;
}

void finding_events(ordered_json& events, const core::TraceLog& log, const core::Finding& f, int flow_id) {
  if (const auto* d = std::get_if<core::RaceDetail>(&f.detail))
    return race_events(events, log, *d, f, flow_id);
  const std::string kind(core::to_string(f.kind));
  const auto list = places(log, f);
  for (const auto& [p, detail] : list) instant(events, p, kind, detail);
  if (list.empty()) {
    // Its operation lies outside this timeline: say so rather than pin it to a wrong place.
    TracePlace start{0, 0, log.slices.empty() ? 0 : log.slices.front().ts_us};
    instant(events, start, kind, f.summary + " (its operation is not in this timeline)");
  }
}

ordered_json slice_args(const core::TraceLog::Slice& s) {
  ordered_json args = {{"op", s.op}};
  if (!s.buffer.empty()) {
    args["buffer"] = s.buffer;
    args["lifetime"] = s.lifetime;
    if (s.buffers.size() > 1) args["buffers"] = s.buffers;
  }
  if (s.bytes >= 0) args["bytes"] = s.bytes;
  if (!s.group.empty()) {
    args["group"] = s.group;
    args["seq"] = s.seq;
  }
  return args;
}

void metadata_events(ordered_json& events, const core::TraceLog& log) {
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
}

// A global instant at each edge where the window left slices out.
void cut_events(ordered_json& events, const core::TraceLog& log) {
  if (log.slices.empty()) return;
  const auto& c = log.cut;
  auto marker = [&](int64_t ts, const std::string& text) {
    events.push_back({{"name", text},
                      {"cat", "trace_cut"},
                      {"ph", "i"},
                      {"s", "g"},
                      {"ts", ts},
                      {"pid", 0},
                      {"tid", 0},
                      {"args", {{"slices_total", c.slices_total}, {"why", c.why}}}});
  };
  if (c.dropped_before > 0)
    marker(log.slices.front().ts_us,
           "trace cut: " + std::to_string(c.dropped_before) + " earlier slices not shown");
  if (c.dropped_after > 0)
    marker(log.slices.back().ts_us,
           "trace cut: " + std::to_string(c.dropped_after) + " later slices not shown");
}
}  // namespace

std::optional<TracePlace> finding_place(const core::TraceLog& log, const core::Finding& f) {
  if (const auto* d = std::get_if<core::RaceDetail>(&f.detail))
    return TracePlace{d->second.rank, tid_of(log, d->second.rank, d->second.stream), d->second.step};
  if (f.op >= 0) return at_slice(op_slice(log, f.op));
  if (const auto* d = std::get_if<core::CollectiveDetail>(&f.detail)) {
    for (const auto& r : d->ranks) {
      if (auto p = at_slice(collective_slice(log, r.rank, d->group, d->index))) return p;
    }
    return std::nullopt;
  }
  if (const auto* d = std::get_if<core::DeadlockDetail>(&f.detail)) {
    if (d->cycle.empty()) return std::nullopt;
    return last_on(log, d->cycle.front().rank, tid_of(log, d->cycle.front().rank, d->cycle.front().where));
  }
  if (const auto* d = std::get_if<core::ElementDetail>(&f.detail)) return step_place(log, d->rank, d->step);
  if (const auto* d = std::get_if<core::NormDetail>(&f.detail)) {
    if (d->step >= 0) return step_place(log, d->rank, d->step);
  }
  return std::nullopt;
}

std::string chrome_trace(const core::TraceLog& log, const std::vector<core::Finding>& findings) {
  ordered_json events = ordered_json::array();
  metadata_events(events, log);
  for (const auto& s : log.slices) {
    events.push_back({{"name", s.name},
                      {"cat", s.category},
                      {"ph", "X"},
                      {"ts", s.ts_us},
                      {"dur", s.dur_us},
                      {"pid", s.rank},
                      {"tid", s.tid},
                      {"args", slice_args(s)}});
  }
  for (const auto& m : log.marks) {
    events.push_back({{"name", m.name},
                      {"cat", "mark"},
                      {"ph", "i"},
                      {"s", "p"},
                      {"ts", m.ts_us},
                      {"pid", m.rank},
                      {"tid", 0}});
  }
  for (const auto& c : log.counters) {
    events.push_back({{"name", "memory " + c.pool},
                      {"cat", "memory"},
                      {"ph", "C"},
                      {"ts", c.ts_us},
                      {"pid", c.rank},
                      {"args", {{"live bytes", c.bytes}}}});
  }
  cut_events(events, log);
  int flow = 1;
  for (const auto& f : findings) finding_events(events, log, f, flow++);
  ordered_json root;
  root["traceEvents"] = std::move(events);
  root["displayTimeUnit"] = "ns";
  root["otherData"] = {{"title", log.title}, {"time", "one microsecond per scheduler step"}};
  if (log.cut.dropped_before > 0 || log.cut.dropped_after > 0) {
    root["otherData"]["cut"] = {{"slices_total", log.cut.slices_total},
                                {"slices_shown", log.slices.size()},
                                {"dropped_before", log.cut.dropped_before},
                                {"dropped_after", log.cut.dropped_after},
                                {"why", log.cut.why}};
  }
  // JSON strings are UTF-8: a kernel, stream or buffer name that is not must still give a
  // trace (U+FFFD in its place), never an exception that loses the trace and the report.
  return root.dump(1, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace shardcheck::reports
