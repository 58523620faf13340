// Training scenarios (docs/semantics.md §5): a mesh, TinyLM, the data source, a strategy, precision,
// the optimizer, mutations, schedule exploration and what to expect. Checked completely
// before anything runs; every problem is reported as `file:line:column: message`.
//   Expected<TrainingScenario> s = load_training_scenario("scenarios/catalog/zero1-race.yaml");
#pragma once

#include <memory>
#include <string>

#include "core/base/status.hpp"
#include "core/layout/mesh.hpp"
#include "core/runtime/allocator.hpp"
#include "core/scenario/expectation.hpp"
#include "core/strategies/training_config.hpp"

namespace shardcheck::core {

// Bounds on what a training scenario may ask for, so that a scenario that loads cannot make
// the run exhaust host memory (docs/limits.md). Model dimensions are bounded by
// ModelLayout::kMaxDim and kMaxLayers; simulated device memory by sim::Options.
struct TrainingLimits {
  // Up to 64 ranks only the bounds below apply. Past 64 (up to 1024) the simulator's own
  // state per rank (its allocator segments, streams, operations and their clocks) adds up too,
  // so the run's length is bounded as well: ranks * layers * microbatches * steps at most
  // 2^14, e.g. one step of one microbatch through 16 layers on 1024 ranks.
  static constexpr int kMaxRanks = 1024;
  static constexpr int kMaxRanksUnbounded = 64;
  static constexpr int64_t kMaxWideMeshWork = int64_t{1} << 14;
  static constexpr int kMaxSteps = 10000;
  static constexpr int kMaxMicrobatches = 256;
  static constexpr int kMaxMicroBatchSize = 1024;
  // The bounds below keep every file that loads within the host memory the Limits table of docs/limits.md
  // states, measured at each bound by tests/cli/memory_bounds_test.cpp.
  static constexpr int64_t kMaxParameters = int64_t{1} << 22;
  // What one microbatch keeps for its backward pass, in elements: seq * micro_batch_size *
  // (2 * vocab + 12 * hidden * layers) (logits and their gradient; each block's saved
  // activations), times the ranks, times the microbatches when a pipeline may hold them all.
  // 2^26 elements are 256 MiB in fp32.
  static constexpr int64_t kMaxActivationElements = int64_t{1} << 26;
  // The single-rank reference keeps every step's weights and gradients (8 bytes per parameter
  // per step): parameters * steps at most 2^24, 128 MiB.
  static constexpr int64_t kMaxReferenceParameterSteps = int64_t{1} << 24;
  // The training judge keeps what every rank held after every step (its weights, model copy
  // and gradients, about 12 bytes per parameter per rank per step), and each rank its own
  // weights and optimizer state: parameters * steps * ranks at most 2^25.
  static constexpr int64_t kMaxJudgedParameterSteps = int64_t{1} << 25;
  // Exact mode sums n = 2 * dp * microbatches grid contributions per element; its grid keeps
  // every fp32 partial sum exact only while n^2 <= 2^23 (core::exact_grid), so dp *
  // microbatches at most 1448. Past it the grid's limit bottoms out and sums round.
  static constexpr int64_t kMaxExactContributions = 1448;
};

// The limits above that depend on several fields at once, for a configuration that may have
// been changed after loading (e.g. `compare --steps`): "" when within them, else what is
// exceeded, as a sentence.
Status training_limits_exceeded(const TrainingConfig& c, const Mesh& mesh, bool with_reference);

struct TrainingScenario {
  std::string file;
  std::string name;
  std::string description;
  std::shared_ptr<const Mesh> mesh;
  TrainingConfig config;
  Allocator allocator = Allocator::caching;
  PoolReuse reuse = PoolReuse::best_fit;
  ScheduleSpec schedule;
  std::string reference = "single_rank";  // single_rank | none
  Expectation expect;
  // The line a finding of this file is placed on (SARIF, JUnit): its first `mutations:` entry,
  // what makes the run buggy, else its `strategy:` line.
  int place_line = 1;
};

Expected<TrainingScenario> load_training_scenario(const std::string& path);
// The scenario of a file `y` has already parsed into `root` (a loader that read `kind:` first
// parses the file once); throws LoadError or YAML::Exception, as YamlReader::parse_file expects.
TrainingScenario read_training_scenario(const YamlReader& y, const YAML::Node& root);
Expected<TrainingScenario> parse_training_scenario(const std::string& text, const std::string& path);

}  // namespace shardcheck::core
