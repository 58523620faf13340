// Report building.
#include "run/report.hpp"

#include <iostream>

#include "core/base/overloaded.hpp"
#include "reports/report.hpp"
#include "run/compare.hpp"
#include "run/exit_code.hpp"
#include "run/interrupt.hpp"

namespace shardcheck::run {

namespace {

constexpr size_t kMaxSlices = 4000;  // a Chrome trace per finding stays a few hundred KB

// The part of a run's timeline a finding needs: around a race's two accesses, or the end.
core::TraceLog window(core::TraceLog log, const core::Finding& f) {
  int64_t lo = 0, hi = INT64_MAX;
  if (const auto* d = std::get_if<core::RaceDetail>(&f.detail)) {
    lo = std::min(d->first.step, d->second.step) - 200;
    hi = std::max(d->first.step, d->second.step) + 200;
  }
  std::vector<core::TraceLog::Slice> kept;
  for (auto& s : log.slices) {
    if (s.ts_us >= lo && s.ts_us <= hi) kept.push_back(std::move(s));
  }
  if (kept.size() > kMaxSlices)
    kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(kMaxSlices));
  log.slices = std::move(kept);
  return log;
}

std::optional<reports::CompareData> loss_curves(const LoadedScenario& s) {
  if (!s.training) return std::nullopt;
  const CompareResult c = compare_on_sim(s, "single_rank", 0);
  if (!c.error.empty() || c.cancelled) return std::nullopt;
  reports::CompareData d;
  d.against = "single_rank";
  d.series = {{c.label, c.ours}, {"single_rank", c.theirs}};
  d.max_abs_diff = c.max_abs;
  d.max_rel_diff = c.max_rel;
  d.bitwise_equal = c.first_divergent.empty();
  d.first_divergent = c.first_divergent;
  d.achievable_loss = c.entropy_rate;
  return d;
}

}  // namespace

reports::ScenarioResult scenario_result(const LoadedScenario& s, const ScenarioOutcome& o,
                                        const ScheduleOverrides& overrides, ResultOptions options) {
  reports::ScenarioResult r;
  r.name = s.name;
  r.file = s.file;
  r.kind = s.kind;
  r.description = s.description;
  r.expected = core::describe(s.expect);
  r.found = o.judged.found;
  r.met = o.judged.met && o.explored.error.empty();
  r.schedules = o.explored.runs_done;
  if (!o.explored.digests.empty()) r.trace_digest = sim::combined_digest(o.explored.digests);
  r.seconds = o.seconds;
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
  if (options.compare && !interrupted()) r.compare = loss_curves(s);
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
