// Training on the simulator against the single-rank reference: every strategy and DistOpt,
// on dp 1, 2, 3, 4 and 8, on 2-D meshes, with pp 2 and 4 and with vpp 2, matches the
// reference bit for bit in exact mode over 3 steps of 4 microbatches (any mismatch is a
// numerics_divergence finding, so "no findings" is the assertion). Each catalog bug, switched
// on, produces the finding docs/semantics.md §4 names; the gradient norm reproduces the upstream
// 5 vs 7.071; mixed precision stays within tolerance and the loss falls.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <functional>

#include "core/base/byte_codec.hpp"
#include "core/check/training_judge.hpp"
#include "core/strategies/fsdp_engine.hpp"
#include "core/train/reference.hpp"
#include "core/train/trainer.hpp"
#include "run/scenario_run.hpp"
#include "sim/oracle.hpp"
#include "sim/world.hpp"

using namespace shardcheck;
using core::Strategy;

namespace {

struct Outcome {
  std::vector<core::Finding> findings;
  std::vector<core::RankResult> ranks;
  sim::RunResult run;
};

core::TrainingConfig config(Strategy s, bool exact = true) {
  core::TrainingConfig c;
  c.model = {64, 16, 4, 8, true, 1234};
  c.strategy = s;
  c.precision.exact = exact;
  c.precision.param = exact ? core::DType::f32 : core::DType::bf16;
  c.microbatches = 4;
  c.micro_batch_size = 2;
  c.steps = 3;
  return c;
}

std::string kinds(const std::vector<core::Finding>& fs) {
  std::string s;
  for (const auto& f : fs) s += std::string(core::to_string(f.kind)) + ": " + f.summary + "\n";
  return s;
}

Outcome train(const core::TrainingConfig& c, std::vector<core::Axis> axes, uint64_t seed = 1,
              sim::Policy policy = sim::Policy::random) {
  auto mesh = std::make_shared<const core::Mesh>(core::Mesh::create(axes).value());
  const core::TrainingSetup setup = core::make_training_setup(c, mesh).value();
  const core::ReferenceResult ref = core::run_reference(c, setup.dp);
  sim::Options o;
  o.ranks = mesh->world_size();
  o.seed = seed;
  o.policy = policy;
  sim::World w(o);
  sim::TrainingOracle oracle(w, setup, &ref);
  Outcome out;
  out.ranks.resize(o.ranks);
  out.run =
      w.run([&](core::Runtime& rt) { return core::train_rank(rt, setup, &oracle, &out.ranks[rt.rank()]); });
  out.findings = out.run.findings;
  for (auto& f : oracle.judge()) out.findings.push_back(f);
  // Every caller expects the run to finish: "no findings" from a run that stopped early (an
  // error, a deadlock, a step budget) would judge fewer steps than configured, or none. So
  // the run must complete and the oracle must have judged exactly c.steps steps.
  INFO(core::to_string(c.strategy) << " on " << mesh->describe() << ": " << out.run.error << "\n"
                                   << kinds(out.findings));
  REQUIRE(out.run.completed);
  REQUIRE(oracle.steps_completed() == c.steps);
  return out;
}

}  // namespace

TEST_CASE("every 1-D strategy and DistOpt match the reference bit for bit on dp 1 to 8", "[sim][training]") {
  for (Strategy s : {Strategy::no_shard, Strategy::optim, Strategy::optim_grads, Strategy::optim_grads_params,
                     Strategy::distopt}) {
    for (int dp : {1, 2, 3, 4, 8}) {
      const Outcome o = train(config(s), {{"dp", dp}});
      INFO(core::to_string(s) << " dp=" << dp << "\n" << kinds(o.findings) << o.run.error);
      REQUIRE(o.run.error.empty());
      REQUIRE(o.run.completed);
      REQUIRE(o.findings.empty());
    }
  }
}

TEST_CASE("hsdp and hfsdp match the reference bit for bit on 2-D meshes", "[sim][training]") {
  for (Strategy s : {Strategy::hsdp, Strategy::hfsdp}) {
    for (auto [outer, inner] : {std::pair{2, 2}, {2, 3}, {3, 2}, {1, 4}}) {
      const Outcome o = train(config(s), {{"dp_outer", outer}, {"dp_inner", inner}});
      INFO(core::to_string(s) << " " << outer << "x" << inner << "\n" << kinds(o.findings) << o.run.error);
      REQUIRE(o.run.completed);
      REQUIRE(o.findings.empty());
    }
  }
}

TEST_CASE("ZeRO-3 on 1024 ranks and HSDP on 32 x 32 match the reference bit for bit", "[sim][training]") {
  // The simulator's and the loader's largest world, on a tiny model so the test stays short
  // (scenarios/scale holds the 12-layer steps the benchmarks time).
  core::TrainingConfig c = config(Strategy::optim_grads_params);
  c.model = {16, 4, 1, 4, true, 1234};
  c.microbatches = 1;
  c.micro_batch_size = 1;
  c.steps = 1;
  for (auto axes :
       {std::vector<core::Axis>{{"dp", 1024}}, std::vector<core::Axis>{{"dp_outer", 32}, {"dp_inner", 32}}}) {
    c.strategy = axes.size() == 1 ? Strategy::optim_grads_params : Strategy::hsdp;
    const Outcome o = train(c, axes);
    INFO(core::to_string(c.strategy) << "\n" << kinds(o.findings) << o.run.error);
    REQUIRE(o.run.error.empty());
    REQUIRE(o.findings.empty());
    REQUIRE(o.ranks.size() == 1024);
  }
}

TEST_CASE("pipelines (pp 2, pp 4, vpp 2) match the reference bit for bit", "[sim][training]") {
  for (Strategy s : {Strategy::no_shard, Strategy::optim, Strategy::optim_grads, Strategy::optim_grads_params,
                     Strategy::distopt}) {
    for (const auto& axes :
         {std::vector<core::Axis>{{"pp", 2}, {"dp", 2}}, std::vector<core::Axis>{{"pp", 4}, {"dp", 2}},
          std::vector<core::Axis>{{"pp", 2}, {"dp", 2}, {"vpp", 2}}}) {
      const Outcome o = train(config(s), axes);
      INFO(core::to_string(s) << " " << core::Mesh::create(axes).value().describe() << "\n"
                              << kinds(o.findings) << o.run.error);
      REQUIRE(o.run.completed);
      REQUIRE(o.findings.empty());
    }
  }
  const Outcome h = train(config(Strategy::hfsdp), {{"pp", 2}, {"dp_outer", 2}, {"dp_inner", 2}});
  INFO(kinds(h.findings) << h.run.error);
  REQUIRE(h.run.error.empty());
  REQUIRE(h.run.completed);
  REQUIRE(h.findings.empty());
}

TEST_CASE("one unified communication stream works as well as separate AG and RS streams", "[sim][training]") {
  for (Strategy s : {Strategy::optim_grads_params, Strategy::hfsdp, Strategy::distopt}) {
    core::TrainingConfig c = config(s);
    c.unified_comm = true;
    const Outcome o = s == Strategy::hfsdp ? train(c, {{"dp_outer", 2}, {"dp_inner", 2}})
                                           : train(c, {{"pp", 2}, {"dp", 2}});
    INFO(core::to_string(s) << "\n" << kinds(o.findings));
    REQUIRE(o.run.completed);
    REQUIRE(o.findings.empty());
  }
}

TEST_CASE("exact-mode agreement is not vacuous: gradients are mostly nonzero on the grid",
          "[sim][training]") {
  const core::TrainingConfig c = config(Strategy::optim);
  const core::ReferenceResult ref = core::run_reference(c, 2);
  int64_t nonzero = 0, total = 0;
  for (const auto& g : ref.steps[0].grads) {
    for (float v : g) nonzero += v != 0.0f, ++total;
  }
  REQUIRE(nonzero > total / 2);
  REQUIRE(ref.steps[0].main[0] != ref.steps[1].main[0]);  // the weights move
}

TEST_CASE("mixed precision stays within tolerance and the loss falls toward the entropy rate",
          "[sim][training]") {
  core::TrainingConfig c = config(Strategy::optim_grads_params, false);
  c.steps = 6;
  c.optimizer.lr = 1e-2;
  const Outcome o = train(c, {{"dp", 4}});
  INFO(kinds(o.findings));
  REQUIRE(o.findings.empty());
  const auto& losses = o.ranks[0].losses;
  auto mean = [](const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += x;
    return s / v.size();
  };
  REQUIRE(mean(losses.back()) < mean(losses.front()) - 0.05);
  REQUIRE(mean(losses.front()) == Approx(std::log(64.0)).epsilon(0.05));  // near uniform at the start
}

TEST_CASE("the tied-embedding norm reproduces the upstream 5 vs 7.071", "[sim][training]") {
  // Four ranks (pp 2 x dp 2); every gradient is zero except two embedding elements, 3 and 4.
  for (bool mutated : {false, true}) {
    core::TrainingConfig c = config(Strategy::optim);
    if (mutated) c.mutations.add(core::Mutation::tied_grad_norm_double_count);
    auto mesh = std::make_shared<const core::Mesh>(core::Mesh::create({{"pp", 2}, {"dp", 2}}).value());
    const core::TrainingSetup setup = core::make_training_setup(c, mesh).value();
    std::vector<std::vector<float>> grads;
    for (int l = 0; l < setup.model->num_logical(); ++l)
      grads.emplace_back(core::numel(setup.model->logical_shape(l)), 0.0f);
    grads[0][5] = 3.0f;
    grads[0][40 * 16 + 3] = 4.0f;
    sim::Options o;
    o.ranks = 4;
    sim::World w(o);
    std::vector<double> norms(4);
    auto r = w.run([&](core::Runtime& rt) -> core::Task<> {
      core::EngineEnv env;
      env.rt = &rt;
      env.model = setup.model.get();
      env.config = &setup.config;
      env.mesh = mesh;
      env.rank = rt.rank();
      env.streams.compute = rt.stream("compute");
      env.units = core::units_of_rank(*setup.model, env.pp_rank());
      core::FsdpEngine engine(env);
      co_await engine.setup();
      co_await engine.load_gradients(grads);
      co_await engine.compute_norm();
      co_await rt.download(engine.norm_value(), env.streams.compute,
                           {reinterpret_cast<std::byte*>(&norms[rt.rank()]), 8});
    });
    REQUIRE(r.completed);
    for (double n : norms) REQUIRE(n == Approx(mutated ? std::sqrt(50.0) : 5.0).epsilon(1e-12));
  }
}

TEST_CASE("every catalog scenario meets its expectation and every mutation has one", "[sim][catalog]") {
  std::set<std::string> mutations;
  int buggy = 0, fixed = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/catalog")) {
    auto s = run::load_scenario(e.path().string());
    REQUIRE(s.ok());
    REQUIRE_FALSE(s->description.empty());
    for (auto m : s->training()->scenario.config.mutations.list())
      mutations.insert(std::string(core::to_string(m)));
    (s->expect.findings.empty() ? fixed : buggy)++;
    const run::ScenarioOutcome out = run::run_scenario(*s, {});
    INFO(e.path().string() << ": found " << core::kinds_to_string(out.judged.found) << " "
                           << out.explored.error);
    REQUIRE(out.explored.error.empty());
    REQUIRE(out.judged.met);
  }
  REQUIRE(mutations.size() == core::kMutations);
  REQUIRE(buggy == core::kMutations);
  REQUIRE(fixed == core::kMutations);
}

TEST_CASE("a judge handed every rank's bytes judges as the judge that saw them (how MPI launches gather)",
          "[sim][training]") {
  core::TrainingConfig c = config(Strategy::optim);
  c.mutations.add(core::Mutation::grad_divisor_on_running_sum);
  auto mesh = std::make_shared<const core::Mesh>(core::Mesh::data_parallel(2));
  const core::TrainingSetup setup = core::make_training_setup(c, mesh).value();
  const core::ReferenceResult ref = core::run_reference(c, setup.dp);
  sim::Options o;
  o.ranks = 2;
  sim::World w(o);
  sim::TrainingOracle seen(w, setup, &ref);
  std::vector<core::RankResult> ranks(2);
  REQUIRE(w.run([&](core::Runtime& rt) {
             return core::train_rank(rt, setup, &seen, &ranks[rt.rank()]);
           }).completed);
  core::DownloadingJudge told(setup, &ref);
  told.import_rank(seen.export_rank(0));
  REQUIRE(told.steps_completed() == 0);  // rank 1 is still missing
  told.import_rank(seen.export_rank(1));
  REQUIRE(told.steps_completed() == c.steps);
  for (int step = 0; step < c.steps; ++step) REQUIRE(told.logical_main(step) == seen.logical_main(step));
  const auto a = seen.judge(), b = told.judge();
  REQUIRE(!a.empty());
  REQUIRE(kinds(a) == kinds(b));
  // Truncated bytes are an error, not a silent partial import.
  std::vector<std::byte> bytes = seen.export_rank(0);
  bytes.resize(bytes.size() / 2);
  REQUIRE_THROWS(told.import_rank(bytes));
}

namespace {

// Exec steps, in order, of rank 0's operations whose description is `what` (the first
// training step's come first).
std::vector<int64_t> exec_steps(const sim::World& w, const std::string& what) {
  std::vector<int64_t> out;
  for (const sim::OpInfo& op : w.ops()) {
    if (op.rank == 0 && op.exec_step >= 0 && w.name(op.name) == what) out.push_back(op.exec_step);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Runs `c` on `axes` and hands the finished world to `inspect`; returns the mean losses.
std::vector<double> run_and_inspect(const core::TrainingConfig& c, std::vector<core::Axis> axes,
                                    uint64_t seed, sim::Policy policy,
                                    const std::function<void(const sim::World&)>& inspect) {
  auto mesh = std::make_shared<const core::Mesh>(core::Mesh::create(axes).value());
  const core::TrainingSetup setup = core::make_training_setup(c, mesh).value();
  sim::Options o;
  o.ranks = mesh->world_size();
  o.seed = seed;
  o.policy = policy;
  sim::World w(o);
  std::vector<core::RankResult> ranks(o.ranks);
  const sim::RunResult r =
      w.run([&](core::Runtime& rt) { return core::train_rank(rt, setup, nullptr, &ranks[rt.rank()]); });
  INFO(r.error << "\n" << kinds(r.findings));
  REQUIRE(r.completed);
  REQUIRE(r.findings.empty());
  inspect(w);
  return core::mean_losses(ranks, c.steps);
}

}  // namespace

// With streams.overlap every strategy and DistOpt still trains bit for bit like the reference
// (the oracle's numerics check) and like its own run without overlap, under several schedules,
// on 2-D meshes and pipelines too. Would fail if a deferred wait left a gradient or weight
// unordered (a race, or a value read early) or if overlap changed any arithmetic. in_order, where
// every launch blocks its host, deadlocked DistOpt on a pipeline with tied embeddings while it
// all-reduced the embedding between the stages as soon as the last stage's bucket was reduced.
TEST_CASE("overlapped communication trains bit for bit like the reference and the run without it",
          "[sim][training][overlap]") {
  for (const core::StrategyInfo& row : core::kStrategyTable) {
    const Strategy s = row.strategy;
    const bool two_d = core::is_two_dimensional(s);
    std::vector<std::vector<core::Axis>> meshes;
    if (two_d) {
      meshes = {{{"dp_outer", 2}, {"dp_inner", 2}}, {{"pp", 2}, {"dp_outer", 1}, {"dp_inner", 2}}};
    } else {
      meshes = {{{"dp", 2}}, {{"dp", 3}}, {{"pp", 2}, {"dp", 2}, {"vpp", 2}}};
    }
    for (const auto& axes : meshes) {
      core::TrainingConfig c = config(s);
      c.overlap = true;
      for (auto [seed, policy] : {std::pair{uint64_t{1}, sim::Policy::random},
                                  {uint64_t{2}, sim::Policy::pct},
                                  {uint64_t{3}, sim::Policy::delay_comm},
                                  {uint64_t{4}, sim::Policy::in_order}}) {
        const Outcome o = train(c, axes, seed, policy);
        INFO(core::to_string(s) << " " << core::Mesh::create(axes).value().describe() << " seed " << seed
                                << "\n"
                                << kinds(o.findings) << o.run.error);
        REQUIRE(o.findings.empty());
        core::TrainingConfig plain = c;
        plain.overlap = false;
        const Outcome p = train(plain, axes, seed, policy);
        REQUIRE(core::mean_losses(o.ranks, c.steps) == core::mean_losses(p.ranks, c.steps));
      }
    }
  }
}

// What overlap is for, read off the executed order: without it the all-gather of block 2
// cannot start before block 1's compute has ended (the AG stream waits for it), and block 2's
// backward cannot start before block 3's reduce-scatter has ended; with it some schedule runs
// each beside the other. Would fail if the prefetch or the deferred wait were dropped, or if
// a wait crept back in.
TEST_CASE(
    "with overlap the next unit's all-gather runs beside the current compute, and each reduce-scatter "
    "beside the next backward",
    "[sim][training][overlap]") {
  core::TrainingConfig c = config(Strategy::optim_grads_params);
  c.microbatches = 1;
  c.steps = 1;
  for (bool overlap : {false, true}) {
    c.overlap = overlap;
    bool ag_beside = false, rs_beside = false;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      for (sim::Policy policy : {sim::Policy::in_order, sim::Policy::random, sim::Policy::delay_comm}) {
        run_and_inspect(c, {{"dp", 2}}, seed, policy, [&](const sim::World& w) {
          const auto ag = exec_steps(w, "all_gather 'block.2:unshard'");
          const auto fc1 = exec_steps(w, "kernel 'fc1'");  // one per block in forward
          const auto rs = exec_steps(w, "reduce_scatter 'block.3:grad'");
          const auto dgrad = exec_steps(w, "kernel 'fc2.dgrad'");  // blocks 3, 2, 1, 0 in backward
          INFO("overlap " << overlap << " seed " << seed);
          REQUIRE(ag.size() == 2);  // forward, then again for the backward
          REQUIRE(fc1.size() == 4);
          REQUIRE(rs.size() == 1);
          REQUIRE(dgrad.size() == 4);
          // Block 1's last forward kernel comes after its fc1: the gather beside block 1's
          // compute started before block 1's fc1 ran to the end of the block.
          if (ag[0] < fc1[1]) ag_beside = true;
          if (dgrad[1] < rs[0]) rs_beside = true;
          if (!overlap) {
            REQUIRE(ag[0] > fc1[1]);
            REQUIRE(rs[0] < dgrad[1]);
          }
        });
      }
    }
    INFO("overlap " << overlap);
    REQUIRE(ag_beside == overlap);
    REQUIRE(rs_beside == overlap);
  }
}

// DistOpt with overlap and buckets of 2000 elements: the first bucket (the last layers) is
// reduce-scattered while the backward of the first layers still runs, and the next step's
// forward starts before the first bucket's parameters are gathered (the gathers start with
// that step, in forward order). Without overlap neither can happen in any schedule.
TEST_CASE("DistOpt with overlap reduces each bucket during the backward and gathers during the forward",
          "[sim][training][overlap]") {
  core::TrainingConfig c = config(Strategy::distopt);
  c.microbatches = 1;
  c.steps = 2;
  c.bucket_size = 2000;
  for (bool overlap : {false, true}) {
    c.overlap = overlap;
    bool rs_beside = false, ag_beside = false;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      for (sim::Policy policy : {sim::Policy::in_order, sim::Policy::random, sim::Policy::delay_comm}) {
        run_and_inspect(c, {{"dp", 2}}, seed, policy, [&](const sim::World& w) {
          const auto rs = exec_steps(w, "reduce_scatter 'distopt:grads0'");
          const auto ag = exec_steps(w, "all_gather 'distopt:params0'");
          const auto emb_bwd = exec_steps(w, "kernel 'embedding_backward'");
          const auto emb_fwd = exec_steps(w, "kernel 'embedding_forward'");
          INFO("overlap " << overlap << " seed " << seed);
          REQUIRE(rs.size() == 2);
          REQUIRE(ag.size() == (overlap ? 1 : 2));  // with overlap, gathered at the next step's start
          REQUIRE(emb_bwd.size() == 2);
          REQUIRE(emb_fwd.size() == 2);
          if (rs[0] < emb_bwd[0]) rs_beside = true;
          if (emb_fwd[1] < ag[0]) ag_beside = true;
          if (!overlap) {
            REQUIRE(rs[0] > emb_bwd[0]);
            REQUIRE(emb_fwd[1] > ag[0]);
          }
        });
      }
    }
    INFO("overlap " << overlap);
    REQUIRE(rs_beside == overlap);
    REQUIRE(ag_beside == overlap);
  }
}
