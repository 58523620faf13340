// Training scenarios (DESIGN.md §5): a mesh, TinyLM, the data source, a strategy, precision,
// the optimizer, mutations, schedule exploration and what to expect. Checked completely
// before anything runs; every problem is reported as `file:line:column: message`.
//   Expected<TrainingScenario> s = load_training_scenario("scenarios/catalog/zero1-race.yaml");
#pragma once

#include <memory>
#include <string>

#include "core/expectation.hpp"
#include "core/mesh.hpp"
#include "core/status.hpp"
#include "core/training_config.hpp"

namespace shardcheck::core {

struct TrainingLimits {
  static constexpr int kMaxRanks = 64;
  static constexpr int kMaxSteps = 10000;
  static constexpr int kMaxMicrobatches = 256;
  static constexpr int kMaxMicroBatchSize = 1024;
  static constexpr int64_t kMaxParameters = int64_t{1} << 27;
};

struct TrainingScenario {
  std::string file;
  std::string name;
  std::string description;
  std::shared_ptr<const Mesh> mesh;
  TrainingConfig config;
  std::string allocator = "caching";
  std::string reuse = "best_fit";
  ScheduleSpec schedule;
  std::string reference = "single_rank";  // single_rank | none
  Expectation expect;
};

Expected<TrainingScenario> load_training_scenario(const std::string& path);
Expected<TrainingScenario> parse_training_scenario(const std::string& text, const std::string& path);

}  // namespace shardcheck::core
