// The gradient-norm oracle (grad_norm_miscount) on both of its judgements: which elements the
// norm counted (an element left out is as wrong as one counted twice) and the value each rank
// computed (the norm of the logical gradient, whatever the engine says it counted). Also the
// engines' norms themselves, for every strategy and a pipeline with a tied embedding, against
// the norm of the single-rank reference's full logical gradient.
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "core/check/training_judge.hpp"
#include "core/train/reference.hpp"
#include "core/train/trainer.hpp"
#include "sim/oracle.hpp"
#include "sim/world.hpp"

using namespace shardcheck;
using core::Strategy;

namespace {

// Changes what a rank reports before the oracle sees it: how these tests put a miscount in
// front of the oracle without a catalog bug in an engine.
using Edit = std::function<void(int rank, int step, double& norm, core::NormPlan& plan)>;

class Tamper final : public core::Observer {
 public:
  Tamper(core::Observer& inner, Edit edit) : inner_(inner), edit_(std::move(edit)) {}

  core::Task<> on_initialized(core::Runtime& rt, const core::RankView& view) override {
    co_await inner_.on_initialized(rt, view);
  }
  core::Task<> on_step_end(core::Runtime& rt, int step, const core::RankView& view, double norm,
                           const core::NormPlan& plan) override {
    core::NormPlan edited = plan;
    edit_(rt.rank(), step, norm, edited);
    co_await inner_.on_step_end(rt, step, view, norm, edited);
  }

 private:
  core::Observer& inner_;
  Edit edit_;
};

core::TrainingConfig config(Strategy s, bool exact = true) {
  core::TrainingConfig c;
  c.model = {64, 16, 4, 8, true, 1234};
  c.strategy = s;
  c.precision.exact = exact;
  c.precision.param = exact ? core::DType::f32 : core::DType::bf16;
  c.microbatches = 4;
  c.micro_batch_size = 2;
  c.steps = 2;
  return c;
}

struct Run {
  core::TrainingSetup setup;
  core::ReferenceResult reference;
  std::vector<core::RankResult> ranks;
  std::vector<core::Finding> judged;  // the training oracle's findings only
  bool completed = false;
};

Run train(const core::TrainingConfig& c, const std::vector<core::Axis>& axes, const Edit& edit = {}) {
  auto mesh = std::make_shared<const core::Mesh>(core::Mesh::create(axes).value());
  Run out{core::make_training_setup(c, mesh).value(), {}, {}, {}, false};
  out.reference = core::run_reference(c, out.setup.dp);
  sim::Options o;
  o.ranks = mesh->world_size();
  sim::World w(o);
  sim::TrainingOracle oracle(w, out.setup, &out.reference);
  Tamper tamper(
      oracle, edit ? edit : [](int, int, double&, core::NormPlan&) {});
  out.ranks.resize(static_cast<size_t>(o.ranks));
  const sim::RunResult r = w.run([&](core::Runtime& rt) {
    return core::train_rank(rt, out.setup, &tamper, &out.ranks[static_cast<size_t>(rt.rank())]);
  });
  out.completed = r.completed && r.error.empty();
  out.judged = oracle.judge();
  return out;
}

// The norm of the reference's full logical gradient, summed here rather than taken from the
// reference trainer, so that neither side's norm code is trusted.
double logical_norm(const core::ReferenceStep& step) {
  double sumsq = 0;
  for (const auto& g : step.grads) {
    for (float v : g) sumsq += static_cast<double>(v) * v;
  }
  return std::sqrt(sumsq);
}

std::string describe(const std::vector<core::Finding>& fs) {
  std::string s;
  for (const auto& f : fs) s += std::string(core::to_string(f.kind)) + ": " + f.explanation + "\n";
  return s;
}

const core::Finding& only_norm_finding(const Run& r) {
  INFO(describe(r.judged));
  REQUIRE(r.judged.size() == 1);
  REQUIRE(r.judged[0].kind == core::FindingKind::grad_norm_miscount);
  return r.judged[0];
}

}  // namespace

TEST_CASE("an element the norm left out is reported as under-counted, naming its parameter", "[sim][norm]") {
  // Rank 0 reports its first counted range one element short at step 0: that element is
  // counted zero times, every other once. The norm value itself is the engine's, untouched.
  int dropped = -1;  // the logical parameter one of whose elements is left out
  const Edit drop_one = [&](int rank, int step, double&, core::NormPlan& plan) {
    if (rank != 0 || step != 0 || plan.counted.empty() || plan.counted.front().count < 2) return;
    plan.counted.front().count -= 1;
    dropped = plan.counted.front().logical;
  };
  const Run r = train(config(Strategy::optim), {{"dp", 2}}, drop_one);
  REQUIRE(r.completed);
  REQUIRE(dropped >= 0);
  const std::string name = r.setup.model->logical_name(dropped);
  const int64_t n = core::numel(r.setup.model->logical_shape(dropped));
  const core::Finding& f = only_norm_finding(r);
  const auto& d = std::get<core::NormDetail>(f.detail);
  REQUIRE(d.params.size() == 1);
  REQUIRE(d.params[0].name == name);
  REQUIRE(d.params[0].counted == 0);  // the wrong count, not the 1 of the other elements
  REQUIRE_THAT(f.summary,
               Catch::StartsWith("step 0:") && Catch::Contains("1 parameter(s) counted other than once"));
  REQUIRE_THAT(f.explanation, Catch::Contains(name + ": counted 0 to 1 times (under-counted: 1 of " +
                                              std::to_string(n) + " elements left out of the norm)"));
  REQUIRE(d.reported == d.expected);  // the value was right: only the count can have caught it
}

TEST_CASE("a parameter left out of the norm entirely is counted zero times", "[sim][norm]") {
  // Every rank leaves the first logical parameter out of its plan at step 1.
  const Edit drop_param = [](int, int step, double&, core::NormPlan& plan) {
    if (step != 1) return;
    std::erase_if(plan.counted, [](const core::NormPlan::Entry& e) { return e.logical == 0; });
  };
  const Run r = train(config(Strategy::optim_grads_params), {{"dp", 2}}, drop_param);
  REQUIRE(r.completed);
  const core::Finding& f = only_norm_finding(r);
  const std::string name = r.setup.model->logical_name(0);
  const int64_t n = core::numel(r.setup.model->logical_shape(0));
  REQUIRE_THAT(f.summary, Catch::StartsWith("step 1:"));
  REQUIRE_THAT(f.explanation,
               Catch::Contains(name + ": counted 0 times (under-counted: " + std::to_string(n) + " of " +
                               std::to_string(n) + " elements left out of the norm)"));
  const auto& d = std::get<core::NormDetail>(f.detail);
  REQUIRE(d.params.size() == 1);
  REQUIRE(d.params[0].name == name);
  REQUIRE(d.params[0].counted == 0);
}

TEST_CASE("a norm value the counted elements do not give is caught by its value", "[sim][norm]") {
  // The plan stays right; only the value a rank reports is wrong. The counting judgement alone
  // cannot see this.
  SECTION("one ulp off in exact mode, where every norm is exact") {
    const Edit ulp = [](int rank, int step, double& norm, core::NormPlan&) {
      if (rank == 1 && step == 0) norm = std::nextafter(norm, 2 * norm);
    };
    const Run r = train(config(Strategy::optim_grads), {{"dp", 2}}, ulp);
    const core::Finding& f = only_norm_finding(r);
    const auto& d = std::get<core::NormDetail>(f.detail);
    REQUIRE(d.params.empty());
    REQUIRE(d.reported == std::nextafter(d.expected, 2 * d.expected));
    REQUIRE_THAT(
        f.summary,
        Catch::StartsWith("step 0: rank 1's gradient norm is") &&
            Catch::Contains("every element is counted once, so the norm was summed from other values"));
  }
  SECTION("the previous step's norm reported again") {
    std::vector<double> first(8, 0.0);
    const Edit stale = [&](int rank, int step, double& norm, core::NormPlan&) {
      if (step == 0) first[static_cast<size_t>(rank)] = norm;
      if (step == 1 && rank == 0) norm = first[0];
    };
    const Run r = train(config(Strategy::distopt), {{"dp", 2}}, stale);
    const core::Finding& f = only_norm_finding(r);
    REQUIRE_THAT(f.summary, Catch::StartsWith("step 1: rank 0's gradient norm is"));
    REQUIRE(std::get<core::NormDetail>(f.detail).reported == first[0]);
  }
  SECTION("mixed precision: a relative error of 1e-6 is caught, fp64 rounding is not") {
    for (double error : {1e-6, 1e-13}) {
      const Edit off = [&](int rank, int step, double& norm, core::NormPlan&) {
        if (rank == 0 && step == 0) norm *= 1 + error;
      };
      const Run r = train(config(Strategy::optim_grads_params, false), {{"dp", 2}}, off);
      INFO("relative error " << error << "\n" << describe(r.judged));
      REQUIRE(r.completed);
      if (error > 1e-9) {
        REQUIRE(only_norm_finding(r).summary.find("rank 0's gradient norm") != std::string::npos);
      } else {
        REQUIRE(r.judged.empty());
      }
    }
  }
}

TEST_CASE("every strategy's norm is the norm of the reference's logical gradient, bit for bit",
          "[sim][norm]") {
  struct Case {
    Strategy strategy;
    std::vector<core::Axis> axes;
  };
  const std::vector<Case> cases = {
      {Strategy::no_shard, {{"dp", 2}}},
      {Strategy::optim, {{"dp", 3}}},
      {Strategy::optim_grads, {{"dp", 4}}},
      {Strategy::optim_grads_params, {{"dp", 2}}},
      {Strategy::distopt, {{"dp", 2}}},
      {Strategy::hsdp, {{"dp_outer", 2}, {"dp_inner", 2}}},
      {Strategy::hfsdp, {{"dp_outer", 2}, {"dp_inner", 2}}},
      // The tied embedding on both pipeline stages: its shared copy must not count again.
      {Strategy::optim, {{"pp", 2}, {"dp", 2}}},
      {Strategy::distopt, {{"pp", 2}, {"dp", 2}}},
      {Strategy::optim_grads_params, {{"pp", 2}, {"dp", 1}, {"vpp", 2}}},
  };
  for (const Case& k : cases) {
    const Run r = train(config(k.strategy), k.axes);
    INFO(core::to_string(k.strategy) << " on " << core::Mesh::create(k.axes).value().describe() << "\n"
                                     << describe(r.judged));
    REQUIRE(r.completed);
    REQUIRE(r.judged.empty());
    for (int step = 0; step < r.setup.config.steps; ++step) {
      const double want = logical_norm(r.reference.steps[static_cast<size_t>(step)]);
      REQUIRE(want > 0);  // not vacuous: a zero gradient would match any norm that sums nothing
      REQUIRE(want == r.reference.steps[static_cast<size_t>(step)].grad_norm);
      for (const core::RankResult& rank : r.ranks) REQUIRE(rank.norms.at(static_cast<size_t>(step)) == want);
    }
  }
}

TEST_CASE("with pp 2 the tied embedding's shared copy is there, and counting it again is caught",
          "[sim][norm]") {
  core::TrainingConfig c = config(Strategy::optim);
  const Run clean = train(c, {{"pp", 2}, {"dp", 2}});
  bool has_shared = false;
  for (const auto& p : clean.setup.model->params()) has_shared = has_shared || p.shared;
  REQUIRE(has_shared);  // else the case above would not test the tied embedding at all
  c.mutations.add(core::Mutation::tied_grad_norm_double_count);
  const Run doubled = train(c, {{"pp", 2}, {"dp", 2}});
  const double want = logical_norm(doubled.reference.steps[0]);
  REQUIRE(doubled.ranks[0].norms.at(0) > want);  // the engine's norm is off ...
  bool norm_found = false;                       // ... and the oracle says so, naming the copy
  for (const auto& f : doubled.judged) {
    if (f.kind != core::FindingKind::grad_norm_miscount) continue;
    norm_found = true;
    REQUIRE_THAT(f.explanation, Catch::Contains("counted 2 times"));
  }
  REQUIRE(norm_found);
}

TEST_CASE("a raised cancellation flag stops the reference, the oracle's captures and its judging",
          "[sim][norm][cancel]") {
  const core::TrainingConfig c = config(Strategy::optim);
  auto mesh = std::make_shared<const core::Mesh>(core::Mesh::create({{"dp", 2}}).value());
  const core::TrainingSetup setup = core::make_training_setup(c, mesh).value();
  std::atomic<bool> flag{true};
  REQUIRE_THROWS_AS(core::run_reference(c, setup.dp, core::CancelToken{&flag}), core::Cancelled);
  flag = false;
  const core::ReferenceResult reference = core::run_reference(c, setup.dp, core::CancelToken{&flag});
  REQUIRE(reference.steps.size() == 2);

  // Raised as rank 0 reports its first step, just before the oracle captures it: the capture
  // polls, and the run stops there, cancelled, not failed.
  sim::Options o;
  o.ranks = 2;
  o.cancel = &flag;
  sim::World w(o);
  sim::TrainingOracle oracle(w, setup, &reference);
  Tamper raise(oracle, [&](int rank, int step, double&, core::NormPlan&) {
    if (rank == 0 && step == 0) flag = true;
  });
  std::vector<core::RankResult> ranks(2);
  const sim::RunResult r = w.run([&](core::Runtime& rt) {
    return core::train_rank(rt, setup, &raise, &ranks[static_cast<size_t>(rt.rank())]);
  });
  REQUIRE(r.cancelled);
  REQUIRE(r.error.empty());
  REQUIRE_FALSE(r.completed);
  REQUIRE(oracle.steps_completed() == 0);
  // Judging polls too.
  REQUIRE_THROWS_AS(oracle.judge(), core::Cancelled);
}
