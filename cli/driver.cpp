// Scenario loading (by `kind:`), option mapping and result printing.
#include "cli/driver.hpp"

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <fstream>
#include <ostream>

#include "core/trace_program.hpp"
#include "core/trace_scenario.hpp"
#include "core/yaml_reader.hpp"

namespace shardcheck::cli {

namespace {

core::Expected<std::string> peek_kind(const std::string& path) {
  try {
    core::YamlReader y(path);
    YAML::Node root = y.load();
    if (!root["kind"]) y.fail(root, "a scenario needs 'kind:' (trace or training)");
    const std::string kind = y.str(root["kind"], "kind");
    if (kind != "trace" && kind != "training") y.fail(root["kind"], "unknown scenario kind '" + kind + "' (expected trace or training)");
    return kind;
  } catch (const core::LoadError& e) {
    return core::Error(e.what());
  }
}

LoadedScenario from_trace(core::TraceScenario t) {
  auto owned = std::make_shared<const core::TraceScenario>(std::move(t));
  LoadedScenario s;
  s.file = owned->file;
  s.name = owned->name;
  s.kind = "trace";
  s.description = owned->description;
  s.expect = owned->expect;
  s.schedule = owned->schedule;
  s.options.ranks = owned->ranks;
  s.options.allocator = *sim::parse_allocator(owned->allocator);
  s.options.reuse = *sim::parse_reuse(owned->reuse);
  const core::TraceScenario* raw = owned.get();
  s.program = [raw](core::Runtime& rt) { return core::run_trace_program(rt, *raw); };
  s.keep = owned;
  return s;
}

}  // namespace

core::Expected<LoadedScenario> load_scenario(const std::string& path) {
  auto kind = peek_kind(path);
  if (!kind) return kind.error();
  if (*kind == "trace") {
    auto t = core::load_trace_scenario(path);
    if (!t) return t.error();
    return from_trace(std::move(t).value());
  }
  return core::Error(path + ":1:1: training scenarios are not supported by this build");
}

core::Expected<sim::Options> options_for(const LoadedScenario& s, const ScheduleOverrides& o) {
  sim::Options opt = s.options;
  const std::string policy = o.policy.value_or(s.schedule.policy);
  auto p = sim::parse_policy(policy);
  if (!p) return core::fail("unknown policy '", policy, "' (expected in_order, random, pct or delay_comm)");
  opt.policy = *p;
  opt.seed = o.seed.value_or(s.schedule.seed);
  opt.pct_depth = s.schedule.depth;
  return opt;
}

ScenarioOutcome run_scenario(const LoadedScenario& s, const ScheduleOverrides& o) {
  ScenarioOutcome out;
  sim::ExploreOptions e;
  e.base = options_for(s, o).value();
  e.runs = o.runs.value_or(s.schedule.runs);
  e.stop_at_first = o.stop_at_first;
  const auto t0 = std::chrono::steady_clock::now();
  out.explored = sim::explore(s.program, e);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.judged = core::judge(s.expect, out.explored.findings);
  return out;
}

void print_findings(std::ostream& out, const LoadedScenario& s, const std::vector<core::Finding>& findings,
                    const std::string& policy_flag) {
  for (const auto& f : findings) {
    out << "[" << core::to_string(f.kind) << "] " << f.explanation << "\n";
    if (f.occurrences > 1) out << "  (seen " << f.occurrences << " times: on several ranks, steps or schedules)\n";
    out << "  reproduce: shardcheck replay " << s.file << " --seed " << f.seed << policy_flag << "\n\n";
  }
}

void print_verdict(std::ostream& out, const LoadedScenario& s, const core::ExpectationResult& r) {
  out << (r.met ? "ok      " : "FAILED  ") << s.name << ": expected " << core::describe(s.expect) << ", found "
      << core::kinds_to_string(r.found);
  if (!r.missing.empty()) out << "; missing " << core::kinds_to_string(r.missing);
  if (!r.unexpected.empty()) out << "; unexpected " << core::kinds_to_string(r.unexpected);
  out << "\n";
}

}  // namespace shardcheck::cli
