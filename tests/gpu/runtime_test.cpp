// The CUDA backend running the same programs the simulator checks: trace programs agree
// with the simulator's values, a deadlock is reported instead of hanging, sends are eager and
// pipelines train, each catalog bug shows on the GPU what it shows on the simulator, training
// on several ranks of one GPU is bitwise equal to DistOpt in exact mode and within tolerance
// of the CPU reference, NCCL reduces across GPUs (skipped, visibly, on one GPU), and --amplify
// makes the races corrupt values on hardware while their fixes stay clean.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/train/trainer.hpp"
#include "run/gpu_backend.hpp"
#include "run/gpu_runs.hpp"
#include "run/scenario.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace shardcheck;

namespace {
// The source tree: the build's, unless SHARDCHECK_SOURCE_DIR says where it is now (tests
// built on one machine run on the GPU machine from another path).
std::string source_dir() {
  const char* env = std::getenv("SHARDCHECK_SOURCE_DIR");
  return env ? env : SHARDCHECK_SOURCE_DIR;
}

run::LoadedScenario load(const std::string& rel) {
  auto s = run::load_scenario(source_dir() + "/scenarios/" + rel);
  REQUIRE(s.ok());
  return std::move(s).value();
}
gpu::GpuOptions options(int ranks) {
  gpu::GpuOptions o;
  o.ranks = ranks;
  o.device_bytes_per_rank = int64_t{2} << 30;
  return o;
}
// A scenario's own ranks and allocator reuse rule, as `shardcheck run --backend gpu` takes
// them: a reuse race reproduces only when the same block is handed out again.
gpu::GpuOptions options(const run::LoadedScenario& s) {
  gpu::GpuOptions o = options(s.options.ranks);
  o.reuse =
      s.options.reuse == core::PoolReuse::earliest ? core::PoolReuse::earliest : core::PoolReuse::best_fit;
  return o;
}
// Of `runs` replays each of the upstream reuse race and its record_stream fix, how many end
// with buffers that differ from the simulator's in-order values.
std::pair<int, int> corrupted_runs(const gpu::GpuOptions& o, int runs) {
  int race_runs = 0, fix_runs = 0;
  const auto race = load("trace/reuse-race.yaml"), fix = load("trace/reuse-fix-record-stream.yaml");
  for (int i = 0; i < runs; ++i) {
    race_runs += run::run_trace_gpu(race, o).buffers_differing > 0;
    fix_runs += run::run_trace_gpu(fix, o).buffers_differing > 0;
  }
  return {race_runs, fix_runs};
}

// The judge's findings, one per line, for a failure message: an INFO inside a loop over them
// would be destroyed before the assertion after the loop.
std::string summaries(const std::vector<core::Finding>& findings) {
  std::ostringstream out;
  for (const auto& f : findings) out << "\n  " << core::to_string(f.kind) << ": " << f.summary;
  return out.str();
}

// Trains `setup` on a fresh world and returns what each rank saw: its own microbatch losses
// and the gradient norm it computed.
std::vector<core::RankResult> train_ranks(const core::TrainingSetup& setup, const gpu::GpuOptions& o) {
  std::vector<core::RankResult> ranks(static_cast<size_t>(o.ranks));
  gpu::GpuWorld world(o);
  const gpu::GpuRunResult r =
      world.run([&](core::Runtime& rt) { return core::train_rank(rt, setup, nullptr, &ranks[rt.rank()]); });
  INFO(r.error);
  REQUIRE(r.completed);
  return ranks;
}

// What each of the catalog's training bugs shows on the GPU in exact mode, without delays.
enum class Shows : uint8_t {
  weights_differ,         // the weights differ from DistOpt's bit for bit
  mismatched_collective,  // the run stops: a collective's members disagree in size
  race_only,              // a race: values change only with the right timing (see the amplify test)
};
struct CatalogBug {
  const char* name;
  Shows shows;
};
constexpr CatalogBug kCatalogBugs[] = {
    {"grad-divisor-on-running-sum", Shows::weights_differ},
    {"zero1-missing-no-sync", Shows::weights_differ},
    {"stale-model-weight-after-step", Shows::weights_differ},
    // Only the ambient context finalizes its gradients: a difference in every order, as the
    // simulator's in-order schedule shows (the race on the other context comes on top).
    {"vpp-separate-contexts", Shows::weights_differ},
    {"pp-embedding-allreduce-raw-shards", Shows::mismatched_collective},
    {"main-grad-alloc-default-stream", Shows::race_only},
    {"prefetch-missing-wait", Shows::race_only},
};
}  // namespace

TEST_CASE("gpu trace programs end with their program-order values, which are the simulator's", "[gpu]") {
  SC_REQUIRE_GPU();
  for (const char* f :
       {"trace/reuse-fix-record-stream.yaml", "trace/p2p-safe.yaml", "trace/host-sync-ordering.yaml",
        "trace/stream-ordered-free-fix.yaml", "trace/reuse-fix-wait-event.yaml"}) {
    const auto s = load(f);
    gpu::GpuOptions o = options(s.options.ranks);
    if (s.options.allocator == core::Allocator::stream_ordered) o.alloc = core::Allocator::stream_ordered;
    const run::GpuTraceRun r = run::run_trace_gpu(s, o);
    INFO(f << ": " << r.result.error << " " << r.first_difference);
    REQUIRE(r.result.completed);
    REQUIRE(r.buffers_compared > 0);
    REQUIRE(r.buffers_differing == 0);
    REQUIRE(r.simulator_differing == 0);
  }
}

TEST_CASE("gpu collectives that differ across ranks in dtype, reduce op, root or tag stop the run", "[gpu]") {
  SC_REQUIRE_GPU();
  for (const char* f : {"trace/collective-mismatch-dtype.yaml", "trace/collective-mismatch-reduce-op.yaml",
                        "trace/collective-mismatch-root.yaml", "trace/collective-swap.yaml"}) {
    const auto s = load(f);
    const run::GpuTraceRun r = run::run_trace_gpu(s, options(s.options.ranks));
    INFO(f << ": " << r.result.error);
    REQUIRE_FALSE(r.result.completed);
    REQUIRE(r.result.program_fault);
    REQUIRE_THAT(r.result.error, Catch::Contains("differs across ranks"));
  }
}

TEST_CASE("a gpu deadlock is reported, not hung on", "[gpu]") {
  SC_REQUIRE_GPU();
  const auto s = load("trace/cross-group-deadlock.yaml");
  const run::GpuTraceRun r = run::run_trace_gpu(s, options(2));
  REQUIRE_FALSE(r.result.completed);
  REQUIRE(r.result.program_fault);  // the program's fault, not the backend's
  REQUIRE_THAT(r.result.error, Catch::Contains("deadlock on the GPU"));
}

TEST_CASE("device-local sends are eager: a send never waits for its recv to be issued", "[gpu]") {
  SC_REQUIRE_GPU();
  // Both ranks send before they receive. The simulator reports the deadlock NCCL would have;
  // the device-local communicator stages each send and completes.
  const auto s = load("trace/p2p-deadlock.yaml");
  const run::GpuTraceRun r = run::run_trace_gpu(s, options(2));
  INFO(r.result.error);
  REQUIRE(r.result.completed);
}

TEST_CASE("gpu pipelines: p2p transfers do not hold up the hosts, and the fixed catalog pipelines train",
          "[gpu]") {
  SC_REQUIRE_GPU();
  // Pipeline schedules issue a rank's sends before the peer's matching recvs; a host that
  // waited at each send for its partner's recv would deadlock here, as the simulator does not.
  for (const char* f :
       {"catalog/pp-embedding-allreduce-raw-shards-fixed.yaml",
        "catalog/tied-grad-norm-double-count-fixed.yaml", "catalog/vpp-separate-contexts-fixed.yaml",
        "catalog/main-grad-alloc-default-stream-fixed.yaml"}) {
    auto s = load(f);
    const run::GpuTrainingRun r = run::run_training_gpu(*s.training(), options(s.options.ranks), true);
    INFO(f << ": " << r.result.error);
    REQUIRE(r.result.completed);
    for (const auto& finding : r.findings) {
      INFO(finding.summary);
      CHECK(finding.kind != core::FindingKind::numerics_divergence);
      CHECK(finding.kind != core::FindingKind::replica_divergence);
    }
  }
}

TEST_CASE(
    "gpu run in exact mode: each catalog bug shows what the simulator finds, each fix matches DistOpt bit "
    "for bit",
    "[gpu]") {
  SC_REQUIRE_GPU();
  for (const CatalogBug& bug : kCatalogBugs) {
    for (const bool fixed : {true, false}) {
      const std::string f = std::string("catalog/") + bug.name + (fixed ? "-fixed" : "") + ".yaml";
      auto s = load(f);
      const gpu::GpuOptions o = options(s.options.ranks);
      const run::GpuBaseline b = run::baseline_for(s, o);
      REQUIRE(b.bitwise);
      const run::GpuTrainingRun r = run::run_training_gpu(*s.training(), o, true);
      const std::string difference =
          r.result.completed ? run::first_weight_difference(*s.training(), r, b) : "";
      INFO(f << ": " << (r.result.completed ? "completed" : "stopped: " + r.result.error)
             << "; first difference: " << difference);
      if (fixed || bug.shows == Shows::race_only) {
        // A fix trains like DistOpt; the race, left to the hardware's timing, still completes
        // (whether it changes values is held to in the amplify test below).
        CHECK(r.result.completed);
        if (fixed) CHECK(difference.empty());
      } else if (bug.shows == Shows::weights_differ) {
        CHECK(r.result.completed);
        CHECK_FALSE(difference.empty());
      } else {  // the first and last stage reduce shards of different sizes together
        CHECK_FALSE(r.result.completed);
        CHECK(r.result.program_fault);
        CHECK_THAT(r.result.error, Catch::Contains("of group 'embedding' differs across ranks"));
      }
    }
  }
}

TEST_CASE("gpu training: exact mode bitwise equal to DistOpt, within tolerance of the reference", "[gpu]") {
  SC_REQUIRE_GPU();
  auto s = load("training/zero1-exact.yaml");
  run::TrainingState& st = *s.training();
  const run::GpuTrainingRun ours = run::run_training_gpu(st, options(4), true);
  INFO(ours.result.error << summaries(ours.findings));
  REQUIRE(ours.result.completed);
  REQUIRE(ours.findings.empty());
  run::TrainingState base = st;
  base.setup.config.strategy = core::Strategy::distopt;
  const run::GpuTrainingRun distopt = run::run_training_gpu(base, options(4), true);
  REQUIRE(distopt.result.completed);
  REQUIRE(ours.weights.size() == 3);
  REQUIRE(ours.weights == distopt.weights);
  REQUIRE(ours.losses == distopt.losses);
}

// Overlapped communication on the device: the same weights and losses as without it, bit for
// bit, for a sharded FSDP strategy, HFSDP and DistOpt (with buckets small enough to reduce
// during the backward), and clean. Would fail if a deferred wait were missing on the device.
TEST_CASE("gpu training with overlapped communication is bitwise equal to the run without it", "[gpu]") {
  SC_REQUIRE_GPU();
  for (const char* strategy : {"optim_grads_params", "hfsdp", "distopt"}) {
    auto s = load("training/zero1-exact.yaml");
    run::TrainingState& st = *s.training();
    st.setup.config.strategy = *core::parse_strategy(strategy);
    if (st.setup.config.strategy == core::Strategy::hfsdp) {
      st.scenario.mesh =
          std::make_shared<const core::Mesh>(core::Mesh::create({{"dp_outer", 2}, {"dp_inner", 2}}).value());
    }
    st.setup = core::make_training_setup(st.setup.config, st.scenario.mesh).value();
    const run::GpuTrainingRun plain = run::run_training_gpu(st, options(4), true);
    REQUIRE(plain.result.completed);
    run::TrainingState ov = st;
    ov.setup.config.overlap = true;
    ov.setup.config.bucket_size = 2000;
    const run::GpuTrainingRun overlapped = run::run_training_gpu(ov, options(4), true);
    INFO(strategy << ": " << overlapped.result.error << summaries(overlapped.findings));
    REQUIRE(overlapped.result.completed);
    REQUIRE(overlapped.findings.empty());
    REQUIRE(overlapped.weights.size() == 3);
    REQUIRE(overlapped.weights == plain.weights);
    REQUIRE(overlapped.losses == plain.losses);
  }
}

TEST_CASE("gpu training under NCCL, one rank per GPU, is bitwise equal to the device-local run in exact mode",
          "[gpu]") {
  // On one GPU this would be a one-rank NCCL run with nothing to reduce: skip, visibly.
  SC_REQUIRE_GPUS(2);
  // Exact mode grid-rounds every contribution, so NCCL's reduction orders must not matter.
  const int n = std::min(gpu::device_count(), 4);
  for (const char* strategy : {"optim", "optim_grads_params", "distopt"}) {
    auto s = load("training/zero1-exact.yaml");
    run::TrainingState& st = *s.training();
    st.setup.config.strategy = *core::parse_strategy(strategy);
    st.scenario.mesh = std::make_shared<const core::Mesh>(core::Mesh::data_parallel(n));
    st.setup = core::make_training_setup(st.setup.config, st.scenario.mesh).value();
    gpu::GpuOptions o = options(n);
    o.comm = gpu::CommMode::nccl;
    const run::GpuTrainingRun nccl = run::run_training_gpu(st, o, true);
    INFO(strategy << " on " << n << " GPUs: " << nccl.result.error << summaries(nccl.findings));
    REQUIRE(nccl.result.completed);
    REQUIRE(nccl.findings.empty());
    const run::GpuTrainingRun local = run::run_training_gpu(st, options(n), true);
    REQUIRE(local.result.completed);
    REQUIRE(local.weights.size() == 3);
    REQUIRE(local.weights == nccl.weights);
    REQUIRE(local.losses == nccl.losses);
    // The equality above needs the reduction across GPUs: each rank trains on its own
    // microbatches (its first losses, before any reduction, differ from every other rank's),
    // and only the reduced gradient gives every rank the same gradient norm at every step.
    const std::vector<core::RankResult> ranks = train_ranks(st.setup, o);
    REQUIRE(ranks[0].norms.size() == 3);
    for (int r = 1; r < n; ++r) {
      INFO("rank " << r);
      REQUIRE(ranks[r].losses.at(0) != ranks[0].losses.at(0));
      REQUIRE(ranks[r].norms == ranks[0].norms);
    }
  }
}

TEST_CASE("measurement switches: reversed reduction order, no communication, recorded collectives", "[gpu]") {
  SC_REQUIRE_GPU();
  auto s = load("training/zero1-exact.yaml");
  run::TrainingState& st = *s.training();
  st.setup.config.precision.exact = false;  // order now matters in the last bits
  st.setup = core::make_training_setup(st.setup.config, st.scenario.mesh).value();
  gpu::GpuOptions o = options(4);
  o.record_collectives = true;
  // A one-cycle spin before each collective: GpuRunResult::delays then counts the collectives
  // that got past skip_communication, over all ranks.
  o.amplify_cycles = 1;
  gpu::GpuWorld forward(o);
  std::vector<core::RankResult> a(4), b(4), c(4);
  const gpu::GpuRunResult ran =
      forward.run([&](core::Runtime& rt) { return core::train_rank(rt, st.setup, nullptr, &a[rt.rank()]); });
  REQUIRE(ran.completed);
  REQUIRE_FALSE(forward.collectives(0).empty());
  for (const auto& call : forward.collectives(0)) REQUIRE(call.members == 4);
  size_t recorded = 0;
  for (int r = 0; r < 4; ++r) recorded += forward.collectives(r).size();
  REQUIRE(ran.delays == static_cast<int64_t>(recorded));
  o.reverse_reduction = true;
  gpu::GpuWorld reversed(o);
  REQUIRE(
      reversed.run([&](core::Runtime& rt) { return core::train_rank(rt, st.setup, nullptr, &b[rt.rank()]); })
          .completed);
  REQUIRE(reversed.collectives(0).size() == forward.collectives(0).size());
  // Same first loss (no reduction has happened yet), close later ones.
  REQUIRE(a[0].losses[0] == b[0].losses[0]);
  REQUIRE(std::fabs(a[0].losses.back()[0] - b[0].losses.back()[0]) < 1e-3);
  o.reverse_reduction = false;
  o.skip_communication = true;
  gpu::GpuWorld silent(o);
  const gpu::GpuRunResult quiet =
      silent.run([&](core::Runtime& rt) { return core::train_rank(rt, st.setup, nullptr, &c[rt.rank()]); });
  REQUIRE(quiet.completed);
  // Every collective was issued (and recorded) as before, and none of them ran.
  REQUIRE(silent.collectives(0).size() == forward.collectives(0).size());
  REQUIRE(quiet.delays == 0);
}

TEST_CASE("amplify: the upstream race corrupts values on hardware, the fix does not", "[gpu]") {
  SC_REQUIRE_GPU();
  gpu::GpuOptions o = options(2);
  o.amplify_cycles = 20'000'000;  // ~10 ms at H200 clocks: the reduce-scatter runs late
  const auto [corrupted, fixed_corrupted] = corrupted_runs(o, 5);
  REQUIRE(corrupted > 0);
  REQUIRE(fixed_corrupted == 0);
}

TEST_CASE("amplify on NCCL's streams: the race corrupts values across GPUs, the fix does not", "[gpu]") {
  SC_REQUIRE_GPUS(2);
  gpu::GpuOptions o = options(2);
  o.comm = gpu::CommMode::nccl;
  o.amplify_cycles = 20'000'000;
  const auto [corrupted, fixed_corrupted] = corrupted_runs(o, 5);
  REQUIRE(corrupted > 0);
  REQUIRE(fixed_corrupted == 0);
}

TEST_CASE(
    "amplify at race sites: only the simulator's earlier access is delayed, and the race still corrupts",
    "[gpu]") {
  SC_REQUIRE_GPU();
  const auto race = load("trace/reuse-race.yaml"), fix = load("trace/reuse-fix-record-stream.yaml");
  const std::vector<run::RaceSite> sites = run::race_sites({race, fix});
  REQUIRE(sites.size() == 1);
  gpu::GpuOptions o = options(2);
  o.amplify_cycles = 20'000'000;
  o.amplify_at = gpu::AmplifyAt::sites;
  o.delay_sites = {{sites[0].rank, sites[0].stream, sites[0].op}};
  const run::GpuTraceRun r = run::run_trace_gpu(race, o);
  REQUIRE(r.result.completed);
  REQUIRE(r.result.delays == 1);  // rank 0's reduce-scatter only; rank 1's is not listed
  REQUIRE(r.buffers_differing > 0);
  const run::GpuTraceRun f = run::run_trace_gpu(fix, o);
  REQUIRE(f.result.delays == 1);
  REQUIRE(f.buffers_differing == 0);
  o.delay_sites = {{0, "rs", "kernel 'no such kernel'"}};  // a site that matches nothing
  REQUIRE(run::run_trace_gpu(race, o).result.delays == 0);
}

TEST_CASE(
    "amplify at race sites: the delays land in the catalog's main-grad race, and its fix stays equal to "
    "DistOpt",
    "[gpu]") {
  SC_REQUIRE_GPU();
  // Megatron-LM #6137 changes values only when the pipeline's receive gets the block before the
  // delayed accumulation has run, which spinning cannot promise (0 to 2 of 10 runs on an H200):
  // force_test.cpp holds the order instead and sees it change values in every run. Here: the
  // delay lands where the simulator's race says, and the fix never differs under it.
  const auto bug = load("catalog/main-grad-alloc-default-stream.yaml"),
             fix = load("catalog/main-grad-alloc-default-stream-fixed.yaml");
  const std::vector<run::RaceSite> sites = run::race_sites({bug, fix});
  // The accumulation, then the finalizing reduce-scatter (two races on one block).
  REQUIRE(sites.size() == 2);
  REQUIRE_THAT(sites[0].op, Catch::EndsWith(".accumulate'"));
  const auto delayed = [&](const run::LoadedScenario& s) {
    gpu::GpuOptions o = options(s);
    o.amplify_cycles = 200'000'000;  // ~0.1 s at H200 clocks
    o.amplify_at = gpu::AmplifyAt::sites;
    o.delay_sites = {{sites[0].rank, sites[0].stream, sites[0].op}};
    return o;
  };
  const run::GpuBaseline fixed_b = run::baseline_for(fix, options(fix));
  REQUIRE(fixed_b.bitwise);
  const run::GpuTrainingRun r = run::run_training_gpu(*bug.training(), delayed(bug), true);
  INFO(r.result.error);
  REQUIRE(r.result.completed);
  REQUIRE(r.result.delays > 0);  // the site is in the program: the delay landed
  for (int i = 0; i < 3; ++i) {
    const run::GpuTrainingRun f = run::run_training_gpu(*fix.training(), delayed(fix), true);
    INFO(f.result.error);
    REQUIRE(f.result.completed);
    REQUIRE(f.result.delays > 0);
    REQUIRE(run::first_weight_difference(*fix.training(), f, fixed_b).empty());
  }
}
