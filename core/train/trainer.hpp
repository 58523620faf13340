// The per-rank training loop: build the rank's engine (an FSDP strategy or DistOpt), run the
// pipeline schedule's forward and backward passes with point-to-point transfers between
// stages, take the optimizer step, and report to the observer at every step end. The same
// coroutine runs on the simulator and on GPUs.
//   TrainingSetup setup = make_training_setup(scenario.config, scenario.mesh).value();
//   world.run([&](Runtime& rt) { return train_rank(rt, setup, &observer, &results[rt.rank()]); });
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/base/status.hpp"
#include "core/layout/mesh.hpp"
#include "core/model/model.hpp"
#include "core/strategies/engine.hpp"
#include "core/strategies/training_config.hpp"

namespace shardcheck::core {

struct TrainingSetup {
  TrainingConfig config;
  std::shared_ptr<const Mesh> mesh;
  std::shared_ptr<const ModelLayout> model;
  std::optional<ExactGrid> grid;
  int dp = 1;  // data-parallel ranks in all (product of the dp axes)
};

Expected<TrainingSetup> make_training_setup(const TrainingConfig& config, std::shared_ptr<const Mesh> mesh);

struct RankResult {
  std::vector<std::vector<float>> losses;  // per step, per microbatch (last pipeline stage only)
  std::vector<double> norms;               // per step: the gradient norm the rank computed
};

Task<> train_rank(Runtime& rt, const TrainingSetup& setup, Observer* observer, RankResult* result);

// The loss of each of the first `steps` steps: the mean over every microbatch loss the ranks
// reported for it (0 for a step none reported).
std::vector<double> mean_losses(const std::vector<RankResult>& ranks, int steps);

}  // namespace shardcheck::core
