// Running a loaded scenario: exploring its schedules (with the SHARDCHECK_TEST_FAULT hook),
// judging the findings, and rerunning the same seeds to check that every run repeats.
#include "run/scenario_run.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/scenario/captured_values.hpp"
#include "run/memory_budget.hpp"
#include "run/processes.hpp"

namespace shardcheck::run {

namespace {

// `note`, when given, says why fewer schedules run at once than asked (run/memory_budget.hpp).
sim::ExploreOptions explore_options(const LoadedScenario& s, const ScheduleOverrides& o,
                                    std::string* note = nullptr) {
  sim::ExploreOptions e;
  e.base = options_for(s, o).value();
  e.runs = o.runs.value_or(s.schedule.runs);
  e.stop_at_first = o.stop_at_first;
  e.stop_at_error = true;  // after an internal error nothing that follows can be trusted
  const JobsCap cap = cap_jobs(s, std::min(sim::resolve_jobs(o.jobs), std::max(1, e.runs)), o.sharing);
  e.jobs = cap.jobs;
  if (note) *note = cap.note;
  e.progress = o.progress;
  if (o.across_processes) e.share = share_across_processes(o.jobs, o.stop_at_first);
  return e;
}

// The scenario's factory, or under SHARDCHECK_TEST_FAULT=internal_error one whose second
// schedule throws.
sim::Factory factory_with_fault(const LoadedScenario& s, uint64_t first_seed) {
  if (test_fault() != TestFault::internal_error) return s.factory;
  return [factory = s.factory, first_seed](sim::World& w) {
    if (w.options().seed == first_seed + 1)
      throw core::InternalError("a test fault (SHARDCHECK_TEST_FAULT=internal_error) in the second schedule");
    return factory(w);
  };
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string describe(const core::Finding& f) {
  return std::string(core::to_string(f.kind)) + " '" + f.summary + "' (seed " + std::to_string(f.seed) +
         ", seen " + std::to_string(f.occurrences) + " times)";
}

// What two whole explorations of the same seeds must share beyond their per-run digests.
std::string compare_whole(const sim::ExploreResult& a, const sim::ExploreResult& b) {
  if (a.runs_done != b.runs_done)
    return std::to_string(a.runs_done) + " schedules ran, then " + std::to_string(b.runs_done) +
           " on the rerun";
  if (a.error != b.error) return "internal error '" + a.error + "', then '" + b.error + "' on the rerun";
  if (a.steps != b.steps || a.ops != b.ops)
    return std::to_string(a.steps) + " scheduler steps and " + std::to_string(a.ops) + " operations, then " +
           std::to_string(b.steps) + " and " + std::to_string(b.ops) + " on the rerun";
  if (a.findings.size() != b.findings.size())
    return std::to_string(a.findings.size()) + " findings, then " + std::to_string(b.findings.size()) +
           " on the rerun";
  for (size_t i = 0; i < a.findings.size(); ++i) {
    const core::Finding &x = a.findings[i], &y = b.findings[i];
    if (x.kind != y.kind || x.key != y.key || x.summary != y.summary || x.explanation != y.explanation ||
        x.seed != y.seed || x.occurrences != y.occurrences)
      return "finding " + std::to_string(i + 1) + ": " + describe(x) + ", then " + describe(y) +
             " on the rerun";
  }
  return "";
}

}  // namespace

TestFault test_fault() {
  static const TestFault fault = [] {
    const char* v = std::getenv("SHARDCHECK_TEST_FAULT");
    const std::string value = v ? v : "";
    if (value == "internal_error") return TestFault::internal_error;
    if (value == "nondeterminism") return TestFault::nondeterminism;
    return TestFault::none;
  }();
  return fault;
}

ScenarioOutcome run_scenario(const LoadedScenario& s, const ScheduleOverrides& o) {
  ScenarioOutcome out;
  const sim::ExploreOptions e = explore_options(s, o, &out.jobs_note);
  const auto t0 = std::chrono::steady_clock::now();
  out.explored = sim::explore(factory_with_fault(s, e.base.seed), e);
  if (s.capture()) {  // what its values show, the same under every schedule
    for (core::Finding& f : core::check_captured_values(*s.capture()))
      core::add_finding(out.explored.findings, f);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.judged = core::judge(s.expect, out.explored.findings);
  return out;
}

DeterminismCheck check_determinism(const LoadedScenario& s, const ScheduleOverrides& o,
                                   const ScenarioOutcome& first) {
  const sim::ExploreResult& a = first.explored;
  sim::ExploreOptions e = explore_options(s, o);
  e.runs = a.runs_done;
  if (test_fault() == TestFault::nondeterminism) e.base.seed += 1;
  if (e.progress) {
    e.progress = [progress = e.progress, done = a.runs_done, found = static_cast<int>(a.findings.size())](
                     int runs, int) { progress(done + runs, found); };
  }
  const sim::ExploreResult b =
      e.runs > 0 ? sim::explore(factory_with_fault(s, e.base.seed), e) : sim::ExploreResult{};
  DeterminismCheck c;
  const uint64_t seed0 = options_for(s, o).value().seed;
  const size_t n = std::min(a.digests.size(), b.digests.size());
  c.runs = static_cast<int>(n);
  for (size_t i = 0; i < n && c.matched; ++i) {
    if (a.digests[i] == b.digests[i]) continue;
    c.matched = false;
    c.mismatch = "run " + std::to_string(i + 1) + " (seed " + std::to_string(seed0 + i) + "): trace digest " +
                 hex(a.digests[i]) + ", then " + hex(b.digests[i]) + " on the rerun";
  }
  if (!c.matched || b.cancelled) return c;  // a rerun cut short: the schedules it finished matched
  c.mismatch = compare_whole(a, b);
  c.matched = c.mismatch.empty();
  return c;
}

}  // namespace shardcheck::run
