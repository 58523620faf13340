// The simulator's training oracle: core::TrainingJudge capturing through the simulator's
// global view, reading every rank's memory directly (no operations, so the schedule under
// test is untouched).
//   TrainingOracle oracle(world, setup, &reference);
//   world.run(...train_rank(rt, setup, &oracle, ...));
//   for (auto& f : oracle.judge()) ...
#pragma once

#include "core/check/training_judge.hpp"
#include "sim/world.hpp"

namespace shardcheck::sim {

class TrainingOracle final : public core::TrainingJudge {
 public:
  TrainingOracle(World& world, const core::TrainingSetup& setup, const core::ReferenceResult* reference)
      : TrainingJudge(setup, reference), world_(world) {
    cancel = core::CancelToken{world.options().cancel};
  }

 protected:
  core::Task<std::vector<Values>> capture(core::Runtime& rt, const std::vector<core::Piece>& pieces) override;

 private:
  World& world_;
};

}  // namespace shardcheck::sim
