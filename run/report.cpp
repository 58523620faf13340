// Report building.
#include "run/report.hpp"

#include <algorithm>
#include <iostream>
#include <map>

#include "core/base/overloaded.hpp"
#include "core/base/text.hpp"
#include "core/scenario/captured_values.hpp"
#include "reports/chrome_trace.hpp"
#include "reports/report.hpp"
#include "run/compare.hpp"
#include "run/exit_code.hpp"
#include "run/interrupt.hpp"

namespace shardcheck::run {

namespace {

constexpr size_t kMaxSlices = 4000;  // a Chrome trace per finding stays a few hundred KB

// A finding's place on a run's events (reports::finding_place's rules, read from the world's
// events rather than a built timeline): the scheduler step of the operation it concerns.
// A race needs no search; any other kind reads the events once, without building a slice.
std::optional<int64_t> place_step(const sim::World& w, const core::Finding& f) {
  const std::vector<sim::TraceEvent>& events = w.trace();
  // The first event that `match` accepts on a stream, else the first on the host.
  auto first_of = [&](auto match) -> std::optional<int64_t> {
    std::optional<int64_t> issue;
    for (const sim::TraceEvent& e : events) {
      if (!match(e)) continue;
      if (e.stream >= 0) return e.step;
      if (!issue) issue = e.step;
    }
    return issue;
  };
  auto stream_of = [&](int rank, const std::string& name) {
    if (name == "host") return -1;  // the timeline's first thread of a rank
    for (int s = 0; s < w.num_streams(rank); ++s)
      if (w.stream_name(rank, s) == name) return s;
    return -1;  // the host, as a thread that is no stream
  };
  if (const auto* d = std::get_if<core::RaceDetail>(&f.detail)) return d->second.step;
  if (f.op >= 0)
    return first_of([&](const sim::TraceEvent& e) { return e.op == static_cast<uint64_t>(f.op); });
  if (const auto* d = std::get_if<core::CollectiveDetail>(&f.detail)) {
    for (const auto& r : d->ranks) {
      auto at = first_of([&](const sim::TraceEvent& e) {
        if (e.rank != r.rank || e.op >= w.op_args().size()) return false;
        const sim::OpArgs& a = w.op_args()[e.op];
        return a.seq == d->index && a.group >= 0 && w.group_name(a.group) == d->group;
      });
      if (at) return at;
    }
    return std::nullopt;
  }
  if (const auto* d = std::get_if<core::DeadlockDetail>(&f.detail)) {
    if (d->cycle.empty()) return std::nullopt;
    const int rank = d->cycle.front().rank, stream = stream_of(rank, d->cycle.front().where);
    for (auto e = events.rbegin(); e != events.rend(); ++e)
      if (e->rank == rank && e->stream == stream) return e->step;
    return std::nullopt;
  }
  int rank = 0, step = -1;
  if (const auto* d = std::get_if<core::ElementDetail>(&f.detail)) {
    rank = d->rank, step = d->step;
  } else if (const auto* n = std::get_if<core::NormDetail>(&f.detail); n && n->step >= 0) {
    rank = n->rank, step = n->step;
  } else {
    return std::nullopt;
  }
  if (step < 0) {
    for (const sim::TraceEvent& e : events)
      if (e.rank == rank) return e.step;
    return std::nullopt;
  }
  for (const sim::HostMark& m : w.marks())
    if (m.rank == rank && m.text == core::step_end_mark(step)) return m.step;
  return std::nullopt;
}

// The part of a run's timeline a finding needs: around a race's two accesses, or the
// kMaxSlices slices that lead up to (and just follow) the operation it concerns, else the
// run's last kMaxSlices. A run that fits is kept whole; a cut says so in the trace. Only the
// window's slices are built.
core::TraceLog window(const sim::World& w, const sim::Timeline& timeline, const core::Finding& f,
                      const std::string& title) {
  const std::vector<sim::TraceEvent>& events = w.trace();
  const size_t n = events.size();
  auto index_at = [&](int64_t step) {
    return static_cast<size_t>(
        std::lower_bound(events.begin(), events.end(), step,
                         [](const sim::TraceEvent& e, int64_t t) { return e.step < t; }) -
        events.begin());
  };
  size_t first = 0, last = n;
  std::string why = "the run's last " + std::to_string(kMaxSlices) + " slices";
  if (const auto* d = std::get_if<core::RaceDetail>(&f.detail)) {
    first = index_at(std::min(d->first.step, d->second.step) - 200);
    last = index_at(std::max(d->first.step, d->second.step) + 201);
    why = "200 scheduler steps around the race's two accesses";
  } else if (const auto step = place_step(w, f)) {
    last = std::min(n, index_at(*step) + kMaxSlices / 4);
    first = last - std::min(last, kMaxSlices);
    why = "the " + std::to_string(kMaxSlices) + " slices around the operation the finding concerns";
  }
  if (last - first > kMaxSlices) first = last - kMaxSlices;
  core::TraceLog log = timeline.log(title, first, last);
  if (first != 0 || last != n)
    log.cut = {static_cast<int64_t>(n), static_cast<int64_t>(first), static_cast<int64_t>(n - last), why};
  return log;
}

// Each finding's timeline: one replay per seed, whatever the number of findings it found,
// and of each run only the slices its findings' windows show.
std::vector<core::TraceLog> finding_timelines(const LoadedScenario& s,
                                              const std::vector<core::Finding>& findings,
                                              const ScheduleOverrides& overrides, ReportCost* cost) {
  const sim::Options base = options_for(s, overrides).value();
  std::map<uint64_t, std::vector<size_t>> by_seed;
  for (size_t i = 0; i < findings.size(); ++i) by_seed[findings[i].seed].push_back(i);
  std::vector<core::TraceLog> out(findings.size());
  for (const auto& [seed, which] : by_seed) {
    if (interrupted()) break;
    sim::Options opt = base;
    opt.seed = seed;
    const sim::Replay rep = sim::replay(s.factory, opt, /*timeline=*/false);
    if (cost) ++cost->replays;
    if (rep.result.cancelled)
      continue;  // a replay a signal cut short shows only part of the run: better none
    const sim::Timeline timeline(*rep.world);
    for (const size_t i : which) {
      out[i] = window(*rep.world, timeline, findings[i], s.name + " seed " + std::to_string(seed));
      if (cost) cost->slices += static_cast<int64_t>(out[i].slices.size());
    }
  }
  return out;
}

// The finding whose schedule the loss curves are drawn from: the first numerics, replica or
// norm finding (what the curves can show), else the first finding of any kind.
const core::Finding* curve_finding(const std::vector<core::Finding>& findings) {
  for (const auto& f : findings) {
    if (core::info(f.kind).drawn_by_curves) return &f;
  }
  return findings.empty() ? nullptr : &findings.front();
}

// Loss curves against the single-rank reference, on the schedule of a finding when there is
// one: the curves and the verdict above them then speak of the same run.
std::optional<reports::CompareData> loss_curves(const LoadedScenario& s,
                                                const std::vector<core::Finding>& findings,
                                                const ScheduleOverrides& overrides) {
  if (!s.training()) return std::nullopt;
  ScheduleOverrides schedule;
  schedule.policy = overrides.policy;
  schedule.seed = overrides.seed;
  const core::Finding* f = curve_finding(findings);
  if (f) schedule.seed = f->seed;
  const CompareResult c = compare_on_sim(s, "single_rank", 0, 1, schedule);
  if (!c.error.empty() || c.cancelled) return std::nullopt;
  reports::CompareData d;
  d.against = "single_rank";
  d.series = {{c.label, c.ours}, {"single_rank", c.theirs}};
  d.max_abs_diff = c.max_abs;
  d.max_rel_diff = c.max_rel;
  d.bitwise_equal = c.first_divergent.empty();
  d.first_divergent = c.first_divergent;
  d.achievable_loss = c.entropy_rate;
  d.schedule = "seed " + std::to_string(c.seed) +
               (f ? " (the schedule that found the " + std::string(core::to_string(f->kind)) + " above)"
                  : " (the file's first schedule)");
  return d;
}

}  // namespace

// The finding kinds a scenario's runs look for: the simulator's detectors, and for training
// the oracles (numerics only against a reference).
std::vector<std::string> detectors_of(const LoadedScenario& s) {
  std::vector<std::string> out;
  for (const auto& row : core::kFindingKindTable) {
    const bool runs = row.found_by == core::FoundBy::detector ||
                      (s.training() && row.found_by == core::FoundBy::training) ||
                      (s.training() && row.found_by == core::FoundBy::reference &&
                       s.training()->scenario.reference != "none") ||
                      (s.capture() && core::is_captured_value_kind(row.kind));
    if (runs) out.emplace_back(row.name);
  }
  return out;
}

reports::ScenarioResult scenario_result(const LoadedScenario& s, const ScenarioOutcome& o,
                                        const ScheduleOverrides& overrides, ResultOptions options) {
  reports::ScenarioResult r;
  r.name = s.name;
  r.file = s.file;
  r.kind = s.kind();
  r.description = s.description;
  r.partial = s.partial;
  r.expected = s.capture() ? "not stated (a capture)" : core::describe(s.expect);
  r.found = o.judged.found;
  // Stopped before a schedule finished: nothing was judged (a long first schedule, a signal).
  r.judged = !(o.explored.cancelled && o.explored.runs_done == 0);
  r.met = r.judged && o.judged.met && o.explored.error.empty();
  r.schedules = o.explored.runs_done;
  if (!o.explored.digests.empty()) r.trace_digest = sim::combined_digest(o.explored.digests);
  r.seconds = o.seconds;
  if (o.explored.runs_done > 0) {
    r.checked = reports::CheckedData{o.explored.steps,
                                     o.explored.ops,
                                     o.explored.collectives,
                                     o.explored.bytes_checked,
                                     s.training() ? s.training()->setup.config.steps : 0,
                                     detectors_of(s)};
  }
  r.findings = o.explored.findings;
  if (!o.explored.error.empty())
    r.error = o.explored.error + " (seed " + std::to_string(o.explored.error_seed) + ")";
  r.policy = overrides.policy.value_or("");
  r.complete = !o.explored.cancelled && o.explored.error.empty();
  if (o.determinism) {
    r.determinism =
        reports::DeterminismData{o.determinism->runs, o.determinism->matched, o.determinism->mismatch};
    if (!o.determinism->matched) {
      r.met = false;
      if (r.error.empty()) r.error = "the determinism check failed: " + o.determinism->mismatch;
    }
  }
  // After a signal the report is written at once: no replays for timelines or loss curves.
  if (options.traces && !interrupted())
    r.finding_traces = finding_timelines(s, r.findings, overrides, options.cost);
  if (options.compare && !interrupted()) r.compare = loss_curves(s, r.findings, overrides);
  return r;
}

bool write_report_to(const reports::Report& report, const std::string& dir) {
  core::Status st;
  {
    ReportWriteGuard guard;
    st = reports::write_report(report, dir);
  }
  if (!st) {
    std::cerr << "shardcheck: cannot write the report: " << core::printable(st.message()) << "\n";
    return false;
  }
  std::cout << "report: " << core::printable(dir)
            << "/report.html (also report.md, report.json, and a Chrome trace per finding)"
            << (report.complete ? "" : "; it is marked incomplete") << "\n";
  return true;
}

CheckedRun run_checked(const LoadedScenario& s, const ScheduleOverrides& o, bool determinism,
                       std::optional<ResultOptions> report) {
  CheckedRun c;
  try {
    c.outcome = run_scenario(s, o);
    const sim::ExploreResult& e = c.outcome.explored;
    c.stopped = e.cancelled;
    if (!s.partial.empty()) c.outcome.judged.met = false;  // a program that did not finish is not clean
    if (e.limit) {
      c.bad_input = s.file +
                    ": bad input: this file needs more than the simulator allows one run: " + e.error +
                    " (seed " + std::to_string(e.error_seed) + ")";
      c.outcome.judged.met = false;  // no verdict on a file whose run was cut
    } else if (!e.error.empty()) {
      c.error = e.error + " (seed " + std::to_string(e.error_seed) + ")";
    }
    if (determinism && !c.stopped && !interrupted() && c.bad_input.empty())
      c.outcome.determinism = check_determinism(s, o, c.outcome);
    if (report) {
      c.result = scenario_result(s, c.outcome, o, *report);
      if (!c.bad_input.empty()) {
        c.result->error = c.bad_input;
        c.result->complete = false;
        c.result->met = false;
      }
    }
  } catch (const std::exception& ex) {
    c.error = ex.what();
    if (report) {
      // What the exploration found is still worth reporting; mapping it alone cannot throw.
      c.result = scenario_result(s, c.outcome, o, ResultOptions{.traces = false, .compare = false});
      c.result->error = c.error;
      c.result->complete = false;
      c.result->met = false;
    }
  }
  return c;
}

void mark_incomplete(reports::Report& r, const char* stopped, const std::string& reason) {
  r.complete = false;
  r.stopped = stopped;
  r.incomplete_reason = reason;
}

int exit_code(bool internal_error, bool nondeterministic, int verdict, bool bad_input) {
  if (internal_error || nondeterministic) return kInternalError;
  if (bad_input) return kBadInput;
  if (interrupted()) return interrupt_exit_code();
  return verdict;
}

}  // namespace shardcheck::run
