// The training-run factory, written once for every backend: each rank trains with a judge
// watching, and after the run the judge's findings join the run's. The simulator's scenario
// runs, compare and the property suite build on `training_factory`; the GPU backend on
// `JudgedTraining` directly.
//   TrainingRun r = run_training(*loaded.training(), options);   // one simulated run, with losses
//   sim::explore(training_factory(state), explore_options);   // the loaded shared TrainingState
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/check/findings.hpp"
#include "core/check/training_judge.hpp"
#include "core/scenario/training_scenario.hpp"
#include "core/train/reference.hpp"
#include "core/train/trainer.hpp"
#include "sim/explore.hpp"

namespace shardcheck::run {

// A training scenario's shared state: its setup and the single-rank reference (computed
// once, on first use, for every schedule explored).
struct TrainingState {
  core::TrainingScenario scenario;
  core::TrainingSetup setup;
  std::optional<core::ReferenceResult> reference;
  const core::ReferenceResult* ensure_reference();
};

// One training run's judge and per-rank results, on any backend. `train` is each rank's
// program; after the run, `add_findings` merges what the judge found into the run's findings.
class JudgedTraining {
 public:
  // `judge` null: the ranks train unwatched (timing runs) and there is nothing to add.
  JudgedTraining(const core::TrainingSetup& setup, std::unique_ptr<core::TrainingJudge> judge, int ranks);

  // One rank's training through `rt` (the backend's runtime, or one that forwards to it),
  // reporting to `observer`: the judge, or an observer that forwards to it.
  core::Task<> train(core::Runtime& rt, core::Observer* observer);
  core::Task<> train(core::Runtime& rt) { return train(rt, judge_.get()); }

  // The judge's findings, each with `seed` (the schedule's; 0 where a backend has none),
  // merged into `findings`, each once.
  void add_findings(std::vector<core::Finding>& findings, uint64_t seed) const;

  core::TrainingJudge* judge() const { return judge_.get(); }
  std::vector<core::RankResult>& ranks() { return ranks_; }
  const std::vector<core::RankResult>& ranks() const { return ranks_; }
  // For each of the first `steps` steps: the mean loss over microbatches and dp ranks, and the
  // judge's logical main weights (per logical parameter).
  std::vector<double> losses(int steps) const { return core::mean_losses(ranks_, steps); }
  std::vector<std::vector<std::vector<float>>> weights(int steps) const;

 private:
  const core::TrainingSetup& setup_;
  std::unique_ptr<core::TrainingJudge> judge_;
  std::vector<core::RankResult> ranks_;
};

// What a caller records of a simulated training run beyond the judge (compare's losses and
// weights, the property suite's recorders). One is built per run, from its world.
class TrainingRecorder {
 public:
  virtual ~TrainingRecorder() = default;
  // The runtime a rank trains through: the world's own, or one that forwards every call to it.
  virtual core::Runtime& runtime(core::Runtime& rt) { return rt; }
  // The observer the ranks report to: the judge, or one that forwards to it.
  virtual core::Observer* observer(core::TrainingJudge& judge) { return &judge; }
  // After the run, with the judge's findings already in `result`, while the world still exists.
  virtual void after(const JudgedTraining& training, sim::World& world, sim::RunResult& result) = 0;
};
using RecorderFactory = std::function<std::shared_ptr<TrainingRecorder>(sim::World&)>;

// The simulated training run, per world: the simulator's oracle judging against `reference()`
// (asked once per run; null: no reference to judge numerics against), every rank training with
// it watching, and its findings merged into the run's with the run's seed. `setup` may alias
// whatever owns it, and is kept alive by the factory.
// `before_judging`, when set, runs after the training and before the judge reads the
// reference: a reference still being computed elsewhere is waited for there (the judge reads
// it only when judging, never while the ranks train).
sim::Factory training_factory(std::shared_ptr<const core::TrainingSetup> setup,
                              std::function<const core::ReferenceResult*()> reference,
                              RecorderFactory recorder = {}, std::function<void()> before_judging = {});
// A training scenario's: judged against its reference, computed on first use.
sim::Factory training_factory(std::shared_ptr<TrainingState> state, RecorderFactory recorder = {});

// One simulated training run with the data `compare` prints.
struct TrainingRun {
  sim::RunResult result;
  std::vector<double> losses;                            // per step: mean over microbatches and dp ranks
  std::vector<std::vector<std::vector<float>>> weights;  // per step, per logical parameter
};
TrainingRun run_training(TrainingState& state, const sim::Options& options);
// The same, judged against `reference`, which another thread may still be computing:
// `before_judging` returns once it is complete (or throws what computing it threw).
TrainingRun run_training(TrainingState& state, const sim::Options& options,
                         const core::ReferenceResult* reference, std::function<void()> before_judging);

}  // namespace shardcheck::run
