// Scenario loading: the file is parsed once and its `kind:` picks the reader of the tree; the
// loaded scenario carries its program (one alternative of a variant), that program's factory (a
// trace program, the training-run factory or a captured program) and simulator options.
#include "run/scenario.hpp"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <iterator>
#include <variant>

#include "core/scenario/captured_program.hpp"
#include "core/scenario/trace_program.hpp"
#include "core/scenario/trace_scenario.hpp"
#include "core/scenario/training_scenario.hpp"
#include "core/scenario/yaml_reader.hpp"
#include "run/interrupt.hpp"

namespace shardcheck::run {

// A trace file that loads runs: its bounds are within the simulator's.
static_assert(core::TraceLimits::kMaxStreams <= sim::Options::kMaxStreamsPerRank);
static_assert(core::TraceLimits::kMaxRanks <= sim::Options::kMaxRanks);

namespace {

// A scenario file, parsed once: its `kind:` picks the reader of the tree already parsed.
using ScenarioFile = std::variant<core::TraceScenario, core::TrainingScenario>;

core::Expected<ScenarioFile> read_scenario_file(const std::string& path) {
  return core::YamlReader::parse_file<ScenarioFile>(
      path, std::nullopt, [](core::YamlReader& y, const YAML::Node& root) -> core::Expected<ScenarioFile> {
        if (!root["kind"]) y.fail(root, "a scenario needs 'kind:' (trace or training)");
        const std::string kind = y.str(root["kind"], "kind");
        if (kind == "trace") return ScenarioFile(core::read_trace_scenario(y, root));
        if (kind == "training") return ScenarioFile(core::read_training_scenario(y, root));
        y.fail(root["kind"], "unknown scenario kind '" + kind + "' (expected trace or training)");
      });
}

LoadedScenario from_trace(core::TraceScenario t) {
  auto owned = std::make_shared<const core::TraceScenario>(std::move(t));
  LoadedScenario s;
  s.file = owned->file;
  s.name = owned->name;
  s.description = owned->description;
  s.expect = owned->expect;
  s.schedule = owned->schedule;
  s.bytes_per_run = owned->bytes_per_run;
  s.options.ranks = owned->ranks;
  s.options.allocator = owned->allocator;
  s.options.reuse = owned->reuse;
  const core::TraceScenario* raw = owned.get();
  s.factory = sim::plain([raw](core::Runtime& rt) { return core::run_trace_program(rt, *raw); });
  s.program = std::move(owned);
  return s;
}

LoadedScenario from_training(core::TrainingScenario t) {
  auto state = std::make_shared<TrainingState>();
  state->scenario = std::move(t);
  LoadedScenario s;
  const core::TrainingScenario& ts = state->scenario;
  s.file = ts.file;
  s.name = ts.name;
  s.description = ts.description;
  s.expect = ts.expect;
  s.schedule = ts.schedule;
  s.options.ranks = ts.mesh->world_size();
  s.options.allocator = ts.allocator;
  s.options.reuse = ts.reuse;
  s.program = std::move(state);
  return s;
}

static_assert(core::CaptureLimits::kMaxStreams <= sim::Options::kMaxStreamsPerRank);
static_assert(core::CaptureLimits::kMaxRanks <= sim::Options::kMaxRanks);

// A captured program (docs/capture-format.md): no expectation (clean is what it should be),
// the schedule defaults of docs/capture.md, and a shadow-only run over
// a simulated address space as large as a real GPU's.
LoadedScenario from_capture(core::CapturedProgram c) {
  auto owned = std::make_shared<const core::CapturedProgram>(std::move(c));
  LoadedScenario s;
  s.file = owned->dir;
  s.name = std::filesystem::path(owned->dir).filename().string();
  if (s.name.empty() || s.name == ".") s.name = "capture";
  const int ranks = owned->world_size;
  s.description = "a captured program: " + std::to_string(ranks) + (ranks == 1 ? " rank, " : " ranks, ") +
                  std::to_string(owned->file_records()) + " records";
  s.partial = owned->partial();
  if (!s.partial.empty()) s.description += "; partial: " + s.partial;
  s.schedule.policy = "random";
  s.schedule.seed = 1;
  s.schedule.runs = kCaptureRuns;
  s.options.ranks = owned->world_size;
  s.options.allocator = owned->allocator;
  s.options.reuse = core::PoolReuse::best_fit;
  s.options.values = false;
  s.options.geometry = core::PoolGeometry::torch;  // where a capture recorded no address
  s.options.max_device_bytes = core::CaptureLimits::kMaxDeviceBytes * owned->world_size;
  const core::CapturedProgram* raw = owned.get();
  s.factory = sim::plain([raw](core::Runtime& rt) { return core::run_captured_program(rt, *raw); });
  s.program = std::move(owned);
  return s;
}

}  // namespace

core::Expected<LoadedScenario> load_scenario(const std::string& path) {
  if (core::is_capture_dir(path)) {  // a folder of rank-*.jsonl files; any other folder is refused below
    auto c = core::load_captured_program(path);
    if (!c) return c.error();
    return from_capture(std::move(c).value());
  }
  auto file = read_scenario_file(path);
  if (!file) return file.error();
  if (auto* t = std::get_if<core::TraceScenario>(&*file)) return from_trace(std::move(*t));
  LoadedScenario s = from_training(std::get<core::TrainingScenario>(std::move(*file)));
  TrainingState& state = *s.training();
  auto setup = core::make_training_setup(state.scenario.config, state.scenario.mesh);
  if (!setup) return core::Error(core::YamlReader::error_text({path, 1, 1}, setup.error().message()));
  state.setup = std::move(setup).value();
  s.factory = training_factory(std::get<std::shared_ptr<TrainingState>>(s.program));
  return s;
}

const core::TraceScenario* LoadedScenario::trace() const {
  const auto* p = std::get_if<std::shared_ptr<const core::TraceScenario>>(&program);
  return p ? p->get() : nullptr;
}

TrainingState* LoadedScenario::training() const {
  const auto* p = std::get_if<std::shared_ptr<TrainingState>>(&program);
  return p ? p->get() : nullptr;
}

const core::CapturedProgram* LoadedScenario::capture() const {
  const auto* p = std::get_if<std::shared_ptr<const core::CapturedProgram>>(&program);
  return p ? p->get() : nullptr;
}

std::string_view LoadedScenario::kind() const {
  constexpr std::string_view kNames[] = {"trace", "training", "capture"};
  static_assert(std::size(kNames) == std::variant_size_v<ScenarioProgram>);
  return kNames[program.index()];
}

core::Expected<sim::Options> options_for(const LoadedScenario& s, const ScheduleOverrides& o) {
  // Every override passes the bounds the file's own value passed when it loaded (docs/limits.md): no command
  // can run a schedule the file could not have asked for.
  using L = core::ScheduleLimits;
  sim::Options opt = s.options;
  const std::string policy = o.policy.value_or(s.schedule.policy);
  auto p = sim::parse_policy(policy);
  if (!p) return core::fail("unknown policy '", policy, "' (expected in_order, random, pct or delay_comm)");
  if (*p == sim::Policy::pct && (s.schedule.depth < 1 || s.schedule.depth > L::kMaxDepth))
    return core::fail(s.file, ": policy pct with depth ", s.schedule.depth, " is out of range 1..",
                      L::kMaxDepth);
  const int runs = o.runs.value_or(s.schedule.runs);
  if (runs < 1 || runs > L::kMaxRuns) {
    return core::fail(s.file, ": ", o.runs ? "--runs " : "the file's runs ", runs, " is out of range 1..",
                      L::kMaxRuns);
  }
  if (const core::Status why = core::trace_bytes_exceeded(s.bytes_per_run, runs); !why)
    return core::fail(s.file, ": ", o.runs ? "--runs " : "the file's runs ", runs, ": ", why.message());
  opt.seed = o.seed.value_or(s.schedule.seed);
  if (opt.seed > static_cast<uint64_t>(L::kMaxSeed))
    return core::fail(s.file, ": --seed ", opt.seed, " is out of range 0..", L::kMaxSeed);
  if (const core::Status why = core::schedule_seeds_exceeded(opt.seed, runs); !why) {
    const std::string seed_from = (o.seed ? "--seed " : "the file's seed ") + std::to_string(opt.seed);
    const std::string runs_from =
        o.runs ? "--runs " + std::to_string(runs) : "the file's " + std::to_string(runs) + " runs";
    return core::fail(s.file, ": ", seed_from, " with ", runs_from, ": ", why.message(),
                      "; choose a smaller seed or fewer runs");
  }
  opt.policy = *p;
  opt.pct_depth = s.schedule.depth;
  opt.cancel = &interrupt_flag();
  return opt;
}

}  // namespace shardcheck::run
