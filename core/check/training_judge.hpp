// The training oracles, independent of the strategy code. At every step end each rank
// reports what it holds (main weights, model weights, finalized gradients, its norm and
// which elements the norm counted); the judge captures those values (the simulator reads
// its memory directly; other backends download them) and, after the run, judges:
//  - numerics_divergence: main weights against the single-rank reference (bitwise in exact
//    mode, else within a tolerance derived from the optimizer's step bound),
//  - replica_divergence: every copy of a logical element identical across ranks,
//  - grad_norm_miscount: each logical element counted exactly once by the norm, and every
//    rank's reported norm equal to the norm of the unique logical gradient elements (exactly
//    in exact mode while the gradients are grid values, else up to fp64 rounding).
//   DownloadingJudge judge(setup, &reference);       // or sim::TrainingOracle
//   world.run(...train_rank(rt, setup, &judge, ...));
//   for (auto& f : judge.judge()) ...
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <span>
#include <vector>

#include "core/check/findings.hpp"
#include "core/strategies/engine.hpp"
#include "core/train/reference.hpp"
#include "core/train/trainer.hpp"

namespace shardcheck::core {

class TrainingJudge : public Observer {
 public:
  // `bitwise`: compare with the reference bit for bit in exact mode. Only where the run's
  // kernels are the reference's (the simulator); on GPUs the tolerance applies.
  TrainingJudge(const TrainingSetup& setup, const ReferenceResult* reference, bool bitwise = true)
      : setup_(setup), reference_(reference), bitwise_(bitwise) {}

  Task<> on_initialized(Runtime& rt, const RankView& view) override;
  Task<> on_step_end(Runtime& rt, int step, const RankView& view, double norm, const NormPlan& plan) override;

  std::vector<Finding> judge() const;
  // Steps every rank finished.
  int steps_completed() const;
  // The logical main weights after a step, assembled from the ranks' pieces (empty when a
  // piece is missing).
  std::vector<std::vector<float>> logical_main(int step) const;

  // What this judge saw of one rank, as bytes, and taking such bytes in: how the process of
  // an MPI launch that judges gets the other processes' ranks.
  std::vector<std::byte> export_rank(int rank) const;
  void import_rank(std::span<const std::byte> bytes);

  // Polled once per (step, rank) while judging and by captures that read much memory: a
  // raised flag stops the judge with core::Cancelled.
  CancelToken cancel;

 protected:
  struct Values {
    Piece piece;
    std::vector<float> data;  // widened to float
  };
  // Reads the pieces' current values; the rank's device work is complete when called.
  virtual Task<std::vector<Values>> capture(Runtime& rt, const std::vector<Piece>& pieces) = 0;

 private:
  struct Snapshot {
    std::vector<Values> main, model, grads;
    double norm = 0;
    NormPlan plan;
    bool present = false;
  };
  void check_replicas(int step, const char* role, std::vector<Finding>& out) const;
  void check_numerics(std::vector<Finding>& out) const;
  void check_norms(std::vector<Finding>& out) const;
  bool norm_matches(double reported, double logical, bool on_grid) const;
  double tolerance(int step, float expected) const;

  const TrainingSetup& setup_;
  const ReferenceResult* reference_;
  bool bitwise_;
  mutable std::mutex mu_;                          // ranks may report from their own threads
  std::map<std::pair<int, int>, Snapshot> snaps_;  // (step, rank); step -1: initial
};

// Captures by downloading through the Runtime: works on every backend.
class DownloadingJudge final : public TrainingJudge {
 public:
  using TrainingJudge::TrainingJudge;

 protected:
  Task<std::vector<Values>> capture(Runtime& rt, const std::vector<Piece>& pieces) override;
};

}  // namespace shardcheck::core
