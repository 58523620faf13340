// Report building.
#include "run/report.hpp"

#include <algorithm>
#include <iostream>
#include <map>

#include "core/base/overloaded.hpp"
#include "core/scenario/captured_values.hpp"
#include "reports/chrome_trace.hpp"
#include "reports/report.hpp"
#include "run/compare.hpp"
#include "run/exit_code.hpp"
#include "run/interrupt.hpp"

namespace shardcheck::run {

namespace {

constexpr size_t kMaxSlices = 4000;  // a Chrome trace per finding stays a few hundred KB

// Slices [first, last) of `log` kept; marks and counters inside their time span, each pool's
// counter carried in at the window's start. Says in `log.cut` what was left out.
void keep_slices(core::TraceLog& log, size_t first, size_t last, const std::string& why) {
  const size_t total = log.slices.size();
  if (first == 0 && last == total) return;
  log.cut = {static_cast<int64_t>(total), static_cast<int64_t>(first), static_cast<int64_t>(total - last),
             why};
  std::vector<core::TraceLog::Slice> kept(
      std::make_move_iterator(log.slices.begin() + static_cast<std::ptrdiff_t>(first)),
      std::make_move_iterator(log.slices.begin() + static_cast<std::ptrdiff_t>(last)));
  log.slices = std::move(kept);
  if (log.slices.empty()) return;
  const int64_t lo = log.slices.front().ts_us, hi = log.slices.back().ts_us;
  std::erase_if(log.marks, [&](const auto& m) { return m.ts_us < lo || m.ts_us > hi; });
  std::vector<core::TraceLog::Counter> counters;
  std::map<std::pair<int, std::string>, size_t> carried;  // the latest value before lo, per pool
  for (auto& c : log.counters) {
    if (c.ts_us > hi) continue;
    if (c.ts_us >= lo) {
      counters.push_back(std::move(c));
      continue;
    }
    c.ts_us = lo;
    auto [it, fresh] = carried.try_emplace({c.rank, c.pool}, counters.size());
    if (fresh) {
      counters.push_back(std::move(c));
    } else {
      counters[it->second] = std::move(c);
    }
  }
  log.counters = std::move(counters);
}

// The part of a run's timeline a finding needs: around a race's two accesses, or the
// kMaxSlices slices that lead up to (and just follow) the operation it concerns. A run that
// fits is kept whole; a cut says so in the trace.
core::TraceLog window(core::TraceLog log, const core::Finding& f) {
  const size_t n = log.slices.size();
  auto index_at = [&](int64_t ts) {
    return static_cast<size_t>(std::lower_bound(log.slices.begin(), log.slices.end(), ts,
                                                [](const auto& s, int64_t t) { return s.ts_us < t; }) -
                               log.slices.begin());
  };
  size_t first = 0, last = n;
  std::string why = "the run's last " + std::to_string(kMaxSlices) + " slices";
  if (const auto* d = std::get_if<core::RaceDetail>(&f.detail)) {
    first = index_at(std::min(d->first.step, d->second.step) - 200);
    last = index_at(std::max(d->first.step, d->second.step) + 201);
    why = "200 scheduler steps around the race's two accesses";
  } else if (const auto place = reports::finding_place(log, f)) {
    const size_t at = index_at(place->ts_us);
    const size_t after = kMaxSlices / 4;
    last = std::min(n, at + after);
    first = last - std::min(last, kMaxSlices);
    why = "the " + std::to_string(kMaxSlices) + " slices around the operation the finding concerns";
  }
  if (last - first > kMaxSlices) first = last - kMaxSlices;
  keep_slices(log, first, last, why);
  return log;
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
  if (options.traces && !interrupted()) {
    const sim::Options base = options_for(s, overrides).value();
    for (const auto& f : r.findings) {
      sim::Options opt = base;
      opt.seed = f.seed;
      sim::Replay rep = sim::replay(s.factory, opt);
      rep.log.title = s.name + " seed " + std::to_string(f.seed);
      // A replay a signal cut short shows only part of the run: better none.
      r.finding_traces.push_back(rep.result.cancelled ? core::TraceLog{} : window(std::move(rep.log), f));
    }
  }
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
    std::cerr << "shardcheck: cannot write the report: " << st.message() << "\n";
    return false;
  }
  std::cout << "report: " << dir
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
