// Shared setup of the benchmark programs: paths, the catalog, training runs from a shape.
#include "bench/bench_support.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/scenario/training_scenario.hpp"

namespace shardcheck::bench {

std::string source_dir() {
  if (const char* env = std::getenv("SHARDCHECK_SOURCE_DIR"); env && *env) return env;
  return SHARDCHECK_SOURCE_DIR;
}

std::vector<std::string> catalog_files(bool buggy_only) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(source_dir() + "/scenarios/catalog")) {
    const std::string path = e.path().string();
    if (e.path().extension() != ".yaml") continue;
    if (buggy_only && stem(path).ends_with("-fixed")) continue;
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  return files;
}

run::LoadedScenario load_or_exit(const std::string& path) {
  auto s = run::load_scenario(path);
  if (!s) {
    std::fprintf(stderr, "%s\n", s.error().message().c_str());
    std::exit(2);
  }
  return std::move(s).value();
}

namespace {

std::string training_yaml(const TrainingShape& t) {
  std::ostringstream y;
  y << "kind: training\n";
  y << "name: bench-" << t.strategy << "-" << t.dp << "x" << t.layers << "\n";
  y << "mesh: {dp: " << t.dp << "}\n";
  y << "model: {vocab: 64, hidden: 16, layers: " << t.layers << ", seq: 8, tied_embeddings: true}\n";
  y << "data: {source: markov, order: 1, seed: 7}\n";
  y << "strategy: " << t.strategy << "\n";
  y << "precision: {exact: true}\n";
  y << "microbatches: " << t.microbatches << "\n";
  y << "micro_batch_size: 2\n";
  y << "steps: " << t.steps << "\n";
  y << "optimizer: {kind: adam, lr: 1.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, clip_grad: 1.0}\n";
  y << "schedule: {policy: random, seed: 1, runs: 1}\n";
  y << "expect: {findings: []}\n";
  return y.str();
}

}  // namespace

std::shared_ptr<run::TrainingState> training_state(const TrainingShape& shape) {
  auto parsed = core::parse_training_scenario(training_yaml(shape), "<bench>");
  if (!parsed) {
    std::fprintf(stderr, "%s\n", parsed.error().message().c_str());
    std::exit(2);
  }
  auto state = std::make_shared<run::TrainingState>();
  state->scenario = std::move(parsed).value();
  auto setup = core::make_training_setup(state->scenario.config, state->scenario.mesh);
  if (!setup) {
    std::fprintf(stderr, "bench: %s\n", setup.error().message().c_str());
    std::exit(2);
  }
  state->setup = std::move(setup).value();
  state->ensure_reference();
  return state;
}

sim::Options sim_options(int ranks) {
  sim::Options o;
  o.ranks = ranks;
  o.policy = sim::Policy::random;
  o.seed = 1;
  o.detectors = true;
  return o;
}

std::string stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

}  // namespace shardcheck::bench
