// Report building.
#include "cli/reporting.hpp"

#include <iostream>

#include "cli/compare.hpp"
#include "core/overloaded.hpp"
#include "reports/report.hpp"

namespace shardcheck::cli {

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
  if (kept.size() > kMaxSlices) kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(kMaxSlices));
  log.slices = std::move(kept);
  return log;
}

std::optional<reports::CompareData> loss_curves(const LoadedScenario& s) {
  if (!s.training) return std::nullopt;
  const CompareResult c = compare_on_sim(s, "single_rank", 0);
  if (!c.error.empty()) return std::nullopt;
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

reports::ScenarioResult scenario_result(const LoadedScenario& s, const ScenarioOutcome& o, const ScheduleOverrides& overrides,
                                        ResultOptions options) {
  reports::ScenarioResult r;
  r.name = s.name;
  r.file = s.file;
  r.kind = s.kind;
  r.description = s.description;
  r.expected = core::describe(s.expect);
  r.found = o.judged.found;
  r.met = o.judged.met && o.explored.error.empty();
  r.schedules = o.explored.runs_done;
  r.seconds = o.seconds;
  r.findings = o.explored.findings;
  r.error = o.explored.error;
  r.policy = overrides.policy.value_or("");
  if (options.traces) {
    const sim::Options base = options_for(s, overrides).value();
    for (const auto& f : r.findings) {
      sim::Options opt = base;
      opt.seed = f.seed;
      sim::Replay rep = sim::replay(s.factory, opt);
      rep.log.title = s.name + " seed " + std::to_string(f.seed);
      r.finding_traces.push_back(window(std::move(rep.log), f));
    }
  }
  if (options.compare) r.compare = loss_curves(s);
  return r;
}

bool write_report_to(const reports::Report& report, const std::string& dir) {
  if (auto st = reports::write_report(report, dir); !st) {
    std::cerr << "shardcheck: cannot write the report: " << st.message() << "\n";
    return false;
  }
  std::cout << "report: " << dir << "/report.html (also report.md, report.json, and a Chrome trace per finding)\n";
  return true;
}

}  // namespace shardcheck::cli
