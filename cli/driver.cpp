// Scenario loading (by `kind:`), option mapping and result printing.
#include "cli/driver.hpp"

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <fstream>
#include <ostream>

#include "core/trace_program.hpp"
#include "core/trace_scenario.hpp"
#include "core/yaml_reader.hpp"
#include "sim/oracle.hpp"

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
  s.factory = sim::plain([raw](core::Runtime& rt) { return core::run_trace_program(rt, *raw); });
  s.keep = owned;
  return s;
}

// Runs every rank's training loop with an oracle watching; the oracle's findings join the
// run's after it ends.
sim::Factory training_factory(std::shared_ptr<TrainingState> state, std::shared_ptr<TrainingRun> capture) {
  return [state, capture](sim::World& w) {
    const core::ReferenceResult* ref = state->ensure_reference();
    auto oracle = std::make_shared<sim::TrainingOracle>(w, state->setup, ref);
    auto results = std::make_shared<std::vector<core::RankResult>>(w.ranks());
    sim::RunSetup rs;
    rs.program = [state, oracle, results](core::Runtime& rt) {
      return core::train_rank(rt, state->setup, oracle.get(), &(*results)[rt.rank()]);
    };
    rs.after = [oracle, results, capture, state](sim::World& world, sim::RunResult& r) {
      for (auto& f : oracle->judge()) {
        f.seed = world.options().seed;
        core::add_finding(r.findings, std::move(f));
      }
      if (!capture) return;
      const int steps = oracle->steps_completed();
      for (int step = 0; step < steps; ++step) {
        double sum = 0;
        int n = 0;
        for (const auto& rr : *results) {
          if (step >= static_cast<int>(rr.losses.size())) continue;
          for (float l : rr.losses[step]) sum += l, ++n;
        }
        capture->losses.push_back(n ? sum / n : 0.0);
        capture->weights.push_back(oracle->logical_main(step));
      }
    };
    return rs;
  };
}

LoadedScenario from_training(core::TrainingScenario t) {
  auto state = std::make_shared<TrainingState>();
  state->scenario = std::move(t);
  LoadedScenario s;
  const core::TrainingScenario& ts = state->scenario;
  s.file = ts.file;
  s.name = ts.name;
  s.kind = "training";
  s.description = ts.description;
  s.expect = ts.expect;
  s.schedule = ts.schedule;
  s.options.ranks = ts.mesh->world_size();
  s.options.allocator = *sim::parse_allocator(ts.allocator);
  s.options.reuse = *sim::parse_reuse(ts.reuse);
  s.training = state;
  s.keep = state;
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
  auto t = core::load_training_scenario(path);
  if (!t) return t.error();
  LoadedScenario s = from_training(std::move(t).value());
  auto setup = core::make_training_setup(s.training->scenario.config, s.training->scenario.mesh);
  if (!setup) return core::Error(path + ":1:1: " + setup.error().message());
  s.training->setup = std::move(setup).value();
  s.factory = training_factory(s.training, nullptr);
  return s;
}

const core::ReferenceResult* TrainingState::ensure_reference() {
  if (scenario.reference == "none") return nullptr;
  if (!reference) reference = core::run_reference(setup.config, setup.dp);
  return &*reference;
}

TrainingRun run_training(TrainingState& state, const sim::Options& options) {
  auto capture = std::make_shared<TrainingRun>();
  std::shared_ptr<TrainingState> alias(std::shared_ptr<TrainingState>{}, &state);  // non-owning
  sim::World w(options);
  capture->result = sim::run_once(w, training_factory(alias, capture));
  return std::move(*capture);
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
  out.explored = sim::explore(s.factory, e);
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
