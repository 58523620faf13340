// compare_on_sim: two trainings on identical data, side by side.
#include "run/compare.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <thread>

#include "core/scenario/training_scenario.hpp"
#include "run/interrupt.hpp"
#include "run/training_run.hpp"

namespace shardcheck::run {

namespace {

std::string describe_element(const core::ModelLayout& m, int logical, int64_t e) {
  const core::Shape& s = m.logical_shape(logical);
  if (s.size() == 2)
    return m.logical_name(logical) + "[" + std::to_string(e / s[1]) + ", " + std::to_string(e % s[1]) + "]";
  return m.logical_name(logical) + "[" + std::to_string(e) + "]";
}

// The first (step, parameter, element) whose bits differ.
std::string first_difference(const core::ModelLayout& m,
                             const std::vector<std::vector<std::vector<float>>>& a,
                             const std::vector<std::vector<std::vector<float>>>& b) {
  for (size_t step = 0; step < std::min(a.size(), b.size()); ++step) {
    if (a[step].empty() || b[step].empty()) return "step " + std::to_string(step) + ": weights incomplete";
    for (size_t p = 0; p < a[step].size(); ++p) {
      for (size_t e = 0; e < a[step][p].size(); ++e) {
        if (std::memcmp(&a[step][p][e], &b[step][p][e], 4) == 0) continue;
        char buf[160];
        std::snprintf(buf, sizeof buf, ": %.9g vs %.9g", a[step][p][e], b[step][p][e]);
        return "after step " + std::to_string(step) + ", " +
               describe_element(m, static_cast<int>(p), static_cast<int64_t>(e)) + buf;
      }
    }
  }
  return "";
}

}  // namespace

core::Status compare_steps_problem(const LoadedScenario& s, const std::string& against, int steps) {
  if (steps <= 0 || !s.training()) return {};
  core::TrainingConfig c = s.training()->setup.config;
  c.steps = steps;
  const bool with_reference = against == "single_rank" || s.training()->scenario.reference != "none";
  const core::Status why = core::training_limits_exceeded(c, *s.training()->scenario.mesh, with_reference);
  if (why) return {};
  return core::fail(s.file + ": --steps " + std::to_string(steps) + ": " + why.message());
}

namespace {

// Against DistOpt on several threads: the single-rank reference, the strategy and DistOpt are
// three independent computations (the two runs' judges read the reference only when judging,
// after their training), so all three start at once and each judge waits for the reference.
void train_beside_reference(TrainingState& state, const sim::Options& o, TrainingRun& ours,
                            TrainingRun& base) {
  TrainingState other = state;
  other.setup.config.strategy = core::Strategy::distopt;
  other.setup.config.mutations = {};
  std::shared_future<void> reference_done;
  const core::ReferenceResult* reference = nullptr;
  auto computed = std::make_shared<core::ReferenceResult>();
  if (state.reference || state.scenario.reference == "none") {
    reference = state.ensure_reference();
  } else {
    reference = computed.get();
    reference_done = std::async(std::launch::async, [&state, computed] {
                       *computed = core::run_reference(state.setup.config, state.setup.dp,
                                                       core::CancelToken{&interrupt_flag()});
                     }).share();
  }
  auto wait = [reference_done] {
    if (reference_done.valid()) reference_done.get();
  };
  std::exception_ptr failure;
  std::thread baseline([&] {
    try {
      base = run_training(other, o, reference, wait);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  try {
    ours = run_training(state, o, reference, wait);
  } catch (...) {
    baseline.join();
    if (reference_done.valid()) reference_done.wait();
    throw;
  }
  baseline.join();
  if (reference_done.valid()) {
    reference_done.wait();
    try {
      reference_done.get();
      state.reference = std::move(*computed);  // kept, as ensure_reference would have
    } catch (const core::Cancelled&) {
      // both runs saw it when judging: they are marked cancelled
    }
  }
  if (failure) std::rethrow_exception(failure);
}

CompareResult compare_on_sim_uncancelled(const LoadedScenario& s, const std::string& against, int steps,
                                         int jobs, const ScheduleOverrides& schedule) {
  CompareResult r;
  r.against = against;
  r.bad_input = compare_steps_problem(s, against, steps).message();
  if (!r.bad_input.empty()) return r;
  TrainingState& state = *s.training();
  if (steps > 0) state.setup.config.steps = steps;
  r.label = std::string(core::to_string(state.setup.config.strategy));
  r.against = against;
  r.exact = state.setup.config.precision.exact;
  sim::Options o = options_for(s, schedule).value();
  r.seed = o.seed;
  // Against DistOpt, the two trainings are independent simulated worlds that only read the
  // setup and the reference: they run on two threads (one with jobs 1), each as deterministic
  // as alone.
  TrainingRun ours, base;
  if (against == "distopt" && sim::resolve_jobs(jobs) == 1) {
    state.ensure_reference();
    TrainingState other = state;
    other.setup.config.strategy = core::Strategy::distopt;
    other.setup.config.mutations = {};
    ours = run_training(state, o);
    base = run_training(other, o);
  } else if (against == "distopt") {
    train_beside_reference(state, o, ours, base);
  } else {
    ours = run_training(state, o);
  }
  r.cancelled = ours.result.cancelled;
  if (!ours.result.error.empty() || r.cancelled) {
    r.error = ours.result.error;
    return r;
  }
  r.ours = ours.losses;
  r.findings = ours.result.findings;
  r.scheduler_steps = ours.result.steps;
  r.operations = ours.result.ops_executed;
  r.collectives = ours.result.collectives;
  r.bytes_checked = ours.result.bytes_checked;
  std::vector<std::vector<std::vector<float>>> theirs_w;
  if (against == "single_rank") {
    state.reference.reset();  // the step count may have changed
    const core::ReferenceResult* ref = state.ensure_reference();
    r.entropy_rate = ref->entropy_rate;
    for (const auto& st : ref->steps) {
      r.theirs.push_back(st.loss);
      theirs_w.push_back(st.main);
    }
  } else {
    r.cancelled = base.result.cancelled;
    if (!base.result.error.empty() || r.cancelled) {
      r.error = base.result.error;
      return r;
    }
    r.theirs = base.losses;
    theirs_w = base.weights;
  }
  for (size_t i = 0; i < std::min(r.ours.size(), r.theirs.size()); ++i) {
    const double d = std::fabs(r.ours[i] - r.theirs[i]);
    r.max_abs = std::max(r.max_abs, d);
    r.max_rel = std::max(r.max_rel, d / std::max(std::fabs(r.theirs[i]), 1e-30));
  }
  r.first_divergent = first_difference(*state.setup.model, ours.weights, theirs_w);
  return r;
}

}  // namespace

CompareResult compare_on_sim(const LoadedScenario& s, const std::string& against, int steps, int jobs,
                             const ScheduleOverrides& schedule) {
  try {
    return compare_on_sim_uncancelled(s, against, steps, jobs, schedule);
  } catch (const core::Cancelled&) {
    CompareResult r;  // the reference, computed outside a run, was stopped by a signal
    r.against = against;
    r.cancelled = true;
    return r;
  }
}

}  // namespace shardcheck::run
