// What the benchmark programs share: where the source tree is, the catalog's scenario files,
// a training run built from a few numbers (ZeRO-3 on a dp mesh, TinyLM of L layers), and a
// custom main that registers benchmarks known only at run time.
//   auto state = bench::training_state({.dp = 8, .layers = 12});
//   run::TrainingRun r = run::run_training(*state, bench::sim_options(8));
#pragma once

#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "run/scenario_run.hpp"
#include "run/training_run.hpp"

namespace shardcheck::bench {

// The source tree: $SHARDCHECK_SOURCE_DIR when set, else where this build was configured from.
std::string source_dir();

// scenarios/catalog/*.yaml in name order; buggy_only drops the *-fixed variants.
std::vector<std::string> catalog_files(bool buggy_only);

// Loads a scenario file or exits with its `file:line:column: message` (a benchmark cannot run
// without its input, and a half-registered table would mislead).
run::LoadedScenario load_or_exit(const std::string& path);

struct TrainingShape {
  int dp = 8;
  int layers = 12;
  int microbatches = 4;
  int steps = 1;
  std::string strategy = "optim_grads_params";  // ZeRO-3
};

// A training scenario of that shape (TinyLM vocab 64, hidden 16, seq 8, tied embeddings, exact
// mode, Adam), set up and with its single-rank reference already computed: the reference is
// computed once per scenario and shared by every schedule explored, so timed runs exclude it.
std::shared_ptr<run::TrainingState> training_state(const TrainingShape& shape);

// Simulator options for a training run on `ranks` ranks: random schedule, seed 1, every detector.
sim::Options sim_options(int ranks);

// The name of a scenario file without folder and extension: "zero1-missing-no-sync".
std::string stem(const std::string& path);

}  // namespace shardcheck::bench
