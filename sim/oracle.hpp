// The training oracles: the simulator's global view, independent of the strategy code.
// At every step end each rank reports what it holds (main weights, model weights, finalized
// gradients, its norm and which elements the norm counted); the oracle reads those bytes
// straight from simulated memory and, after the run, judges:
//  - numerics_divergence: main weights against the single-rank reference (bitwise in exact
//    mode, else within a tolerance derived from the optimizer's step bound),
//  - replica_divergence: every copy of a logical element identical across ranks,
//  - grad_norm_miscount: each logical element counted exactly once by the norm, and the
//    reported norm equal to the norm of the unique logical gradient elements.
//   TrainingOracle oracle(world, setup, &reference);
//   world.run(...train_rank(rt, setup, &oracle, ...));
//   for (auto& f : oracle.judge()) ...
#pragma once

#include <map>
#include <vector>

#include "core/engine.hpp"
#include "core/reference.hpp"
#include "core/trainer.hpp"
#include "sim/world.hpp"

namespace shardcheck::sim {

class TrainingOracle final : public core::Observer {
 public:
  TrainingOracle(World& world, const core::TrainingSetup& setup, const core::ReferenceResult* reference)
      : world_(world), setup_(setup), reference_(reference) {}

  core::Task<> on_initialized(core::Runtime& rt, const core::RankView& view) override;
  core::Task<> on_step_end(core::Runtime& rt, int step, const core::RankView& view, double norm,
                           const core::NormPlan& plan) override;

  std::vector<core::Finding> judge() const;
  // Steps every rank finished.
  int steps_completed() const;
  // The logical main weights after a step, assembled from the ranks' pieces (empty when a
  // piece is missing).
  std::vector<std::vector<float>> logical_main(int step) const;

 private:
  struct Values {
    core::Piece piece;
    std::vector<float> data;  // widened to float
  };
  struct Snapshot {
    std::vector<Values> main, model, grads;
    double norm = 0;
    core::NormPlan plan;
    bool present = false;
  };
  std::vector<Values> capture(int rank, const std::vector<core::Piece>& pieces) const;
  void check_replicas(int step, const char* role, std::vector<core::Finding>& out) const;
  void check_numerics(std::vector<core::Finding>& out) const;
  void check_norms(std::vector<core::Finding>& out) const;
  double tolerance(int step, float expected) const;

  World& world_;
  const core::TrainingSetup& setup_;
  const core::ReferenceResult* reference_;
  std::map<std::pair<int, int>, Snapshot> snaps_;  // (step, rank); step -1: initial
};

}  // namespace shardcheck::sim
