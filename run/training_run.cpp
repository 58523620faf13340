// Training runs: each rank trains with the judge watching; the judge's findings join the run's.
// On the simulator the judge is the oracle reading memory through the world's global view, so
// watching adds no operation and leaves the schedule under test untouched.
#include "run/training_run.hpp"

#include <mutex>

#include "run/interrupt.hpp"
#include "sim/oracle.hpp"

namespace shardcheck::run {

namespace {

// Keeps compare's per-step losses and logical main weights.
class LossesAndWeights final : public TrainingRecorder {
 public:
  explicit LossesAndWeights(TrainingRun& out) : out_(out) {}

  void after(const JudgedTraining& training, sim::World&, sim::RunResult&) override {
    const int steps = training.judge()->steps_completed();
    out_.losses = training.losses(steps);
    out_.weights = training.weights(steps);
  }

 private:
  TrainingRun& out_;
};

}  // namespace

const core::ReferenceResult* TrainingState::ensure_reference() {
  if (scenario.reference == "none") return nullptr;
  // The reference can take longer than an interrupt may wait: it polls the flag and stops
  // with core::Cancelled, which a run (sim::run_once) turns into a cancelled result.
  if (!reference)
    reference = core::run_reference(setup.config, setup.dp, core::CancelToken{&interrupt_flag()});
  return &*reference;
}

JudgedTraining::JudgedTraining(const core::TrainingSetup& setup, std::unique_ptr<core::TrainingJudge> judge,
                               int ranks)
    : setup_(setup), judge_(std::move(judge)), ranks_(static_cast<size_t>(ranks)) {}

core::Task<> JudgedTraining::train(core::Runtime& rt, core::Observer* observer) {
  return core::train_rank(rt, setup_, observer, &ranks_[rt.rank()]);
}

void JudgedTraining::add_findings(std::vector<core::Finding>& findings, uint64_t seed) const {
  if (!judge_) return;
  for (auto& f : judge_->judge()) {
    f.seed = seed;
    core::add_finding(findings, std::move(f));
  }
}

std::vector<std::vector<std::vector<float>>> JudgedTraining::weights(int steps) const {
  std::vector<std::vector<std::vector<float>>> out;
  for (int step = 0; judge_ && step < steps; ++step) out.push_back(judge_->logical_main(step));
  return out;
}

sim::Factory training_factory(std::shared_ptr<const core::TrainingSetup> setup,
                              std::function<const core::ReferenceResult*()> reference,
                              RecorderFactory recorder, std::function<void()> before_judging) {
  return [setup, reference, recorder, before_judging](sim::World& w) {
    const core::ReferenceResult* ref = reference();
    auto oracle = std::make_unique<sim::TrainingOracle>(w, *setup, ref);
    auto training = std::make_shared<JudgedTraining>(*setup, std::move(oracle), w.ranks());
    std::shared_ptr<TrainingRecorder> rec = recorder ? recorder(w) : nullptr;
    core::Observer* observer = rec ? rec->observer(*training->judge()) : training->judge();
    sim::RunSetup rs;
    rs.program = [setup, training, rec, observer](core::Runtime& rt) {
      return training->train(rec ? rec->runtime(rt) : rt, observer);
    };
    rs.after = [training, rec, before_judging](sim::World& world, sim::RunResult& r) {
      if (before_judging) before_judging();
      training->add_findings(r.findings, world.options().seed);
      if (rec) rec->after(*training, world, r);
    };
    return rs;
  };
}

sim::Factory training_factory(std::shared_ptr<TrainingState> state, RecorderFactory recorder) {
  std::shared_ptr<const core::TrainingSetup> setup(state, &state->setup);  // keeps the state alive
  // Runs on several threads ask at once; the first computes the reference, the others wait.
  auto once = std::make_shared<std::mutex>();
  return training_factory(
      setup,
      [state, once] {
        std::lock_guard<std::mutex> lock(*once);
        return state->ensure_reference();
      },
      std::move(recorder));
}

TrainingRun run_training(TrainingState& state, const sim::Options& options) {
  TrainingRun out;
  std::shared_ptr<TrainingState> alias(std::shared_ptr<TrainingState>{}, &state);  // non-owning
  sim::World w(options);
  out.result = sim::run_once(
      w, training_factory(alias, [&out](sim::World&) { return std::make_shared<LossesAndWeights>(out); }));
  return out;
}

TrainingRun run_training(TrainingState& state, const sim::Options& options,
                         const core::ReferenceResult* reference, std::function<void()> before_judging) {
  TrainingRun out;
  std::shared_ptr<const core::TrainingSetup> setup(std::shared_ptr<TrainingState>{},
                                                   &state.setup);  // non-owning
  sim::World w(options);
  out.result = sim::run_once(w, training_factory(
                                    setup, [reference] { return reference; },
                                    [&out](sim::World&) { return std::make_shared<LossesAndWeights>(out); },
                                    std::move(before_judging)));
  return out;
}

}  // namespace shardcheck::run
