// Forced race replay (`run --backend gpu --force-race`): the simulator's racing order enforced on
// the hardware. The upstream reuse race and the catalog's main-grad race change values in every
// run; their fixes in none, each hold released by the second access or by the fix's ordering and
// never by its deadline; a hold nobody releases ends at its deadline and the GPU stays usable.
#include <cstdlib>

#include "gpu/holds.hpp"
#include "run/gpu_backend.hpp"
#include "run/gpu_runs.hpp"
#include "run/scenario.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace shardcheck;

// Every kernel loaded when CUDA starts, as `run --force-race` has it: loading one later needs the
// device idle, which a held stream never is. Set before main, so before any test starts CUDA.
static const bool eager_loading = [] { return setenv("CUDA_MODULE_LOADING", "EAGER", 1) == 0; }();

namespace {
std::string source_dir() {
  const char* env = std::getenv("SHARDCHECK_SOURCE_DIR");
  return env ? env : SHARDCHECK_SOURCE_DIR;
}
run::LoadedScenario load(const std::string& rel) {
  auto s = run::load_scenario(source_dir() + "/scenarios/" + rel);
  REQUIRE(s.ok());
  return std::move(s).value();
}
gpu::GpuOptions forced(const run::LoadedScenario& s, const std::vector<run::ForcedHold>& holds) {
  gpu::GpuOptions o;
  o.ranks = s.options.ranks;
  o.reuse =
      s.options.reuse == core::PoolReuse::earliest ? core::PoolReuse::earliest : core::PoolReuse::best_fit;
  o.device_bytes_per_rank = int64_t{2} << 30;
  o.hold_deadline_seconds = 10;
  for (const auto& h : holds) {
    o.holds.push_back({{h.first_rank, h.first_stream, h.first_op, h.first_occurrence},
                       {h.second_rank, h.second_stream, h.second_op, h.second_occurrence},
                       h.freed_buffer,
                       h.reusing_buffer});
  }
  return o;
}
using How = gpu::HoldOutcome::How;
}  // namespace

TEST_CASE("forced replay: the reuse race changes values in every run, each of its fixes in none", "[gpu]") {
  SC_REQUIRE_GPU();
  const auto race = load("trace/reuse-race.yaml");
  const auto holds = run::forced_holds({race});
  REQUIRE(holds.size() == 1);
  const gpu::GpuOptions o = forced(race, holds);
  for (int i = 0; i < 10; ++i) {
    const run::GpuTraceRun r = run::run_trace_gpu(race, o);
    INFO("run " << i << ": " << r.result.error);
    REQUIRE(r.result.completed);
    REQUIRE(r.result.holds.size() == 1);
    CHECK(r.result.holds[0].how == How::second_access);
    REQUIRE(r.buffers_differing > 0);
  }
  // The first three keep the block from the next allocation: the hold is released by that
  // allocation's write, which no longer lands on the block the reduce-scatter reads. The
  // fourth orders the write after the read: its hold is released by that ordering.
  const std::vector<std::pair<std::string, How>> fixes = {
      {"trace/reuse-fix-record-stream.yaml", How::second_access},
      {"trace/reuse-fix-alloc-on-rs.yaml", How::second_access},
      {"trace/reuse-fix-persistent.yaml", How::second_access},
      {"trace/reuse-fix-wait-event.yaml", How::ordering}};
  for (const auto& [file, how] : fixes) {
    const auto fix = load(file);
    for (int i = 0; i < 10; ++i) {
      const run::GpuTraceRun r = run::run_trace_gpu(fix, forced(fix, holds));
      INFO(file << " run " << i << ": " << r.result.error);
      REQUIRE(r.result.completed);
      REQUIRE(r.result.holds.size() == 1);
      CHECK(r.result.holds[0].how == how);
      if (how == How::ordering)
        CHECK(r.result.holds[0].why == "rank 0 'compute' waits for event 'grad_read'");
      REQUIRE(r.buffers_differing == 0);
    }
  }
}

TEST_CASE("forced replay: the catalog's main-grad race differs from DistOpt in every run, its fix in none",
          "[gpu]") {
  SC_REQUIRE_GPU();
  const auto bug = load("catalog/main-grad-alloc-default-stream.yaml"),
             fix = load("catalog/main-grad-alloc-default-stream-fixed.yaml");
  const auto holds = run::forced_holds({bug, fix});
  REQUIRE(holds.size() == 3);  // tests/run/forced_holds_test.cpp names them
  const run::GpuBaseline b = run::baseline_for(bug, forced(bug, {})),
                         fb = run::baseline_for(fix, forced(fix, {}));
  REQUIRE(b.bitwise);
  for (int i = 0; i < 5; ++i) {
    const run::GpuTrainingRun r = run::run_training_gpu(*bug.training(), forced(bug, holds), true);
    INFO("run " << i << ": " << r.result.error);
    REQUIRE(r.result.completed);
    REQUIRE(r.result.holds.size() == 3);
    for (const auto& h : r.result.holds) CHECK(h.how == How::second_access);
    REQUIRE_FALSE(run::first_weight_difference(*bug.training(), r, b).empty());
    const run::GpuTrainingRun f = run::run_training_gpu(*fix.training(), forced(fix, holds), true);
    INFO("fix run " << i << ": " << f.result.error);
    REQUIRE(f.result.completed);
    for (const auto& h : f.result.holds) CHECK(h.how != How::deadline);
    REQUIRE(run::first_weight_difference(*fix.training(), f, fb).empty());
  }
}

TEST_CASE("forced replay: a hold nobody releases ends at its deadline, and the GPU stays usable", "[gpu]") {
  SC_REQUIRE_GPU();
  cudaStream_t s, s2;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
  {
    gpu::Holds holds({{{0, "rs", "kernel 'x'", 0}, {0, "compute", "kernel 'y'", 0}, "", ""}}, 0.2);
    holds.before(0, 1, "rs", "kernel 'x'", s);         // armed; 'y' never comes
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);  // returns: the wait gave up by itself
    std::string error;
    const auto out = holds.outcomes(error);
    REQUIRE(out.size() == 1);
    CHECK(out[0].how == How::deadline);
    CHECK(error.find(
              "rank 0 'rs' kernel 'x' (#1) until rank 0 'compute' kernel 'y' (#1) missed its deadline") !=
          std::string::npos);
  }
  // The device goes on: a released hold passes at once.
  gpu::Holds again({{{0, "rs", "kernel 'x'", 0}, {0, "compute", "kernel 'y'", 0}, "", ""}}, 5);
  again.before(0, 1, "rs", "kernel 'x'", s);
  again.before(0, 0, "compute", "kernel 'y'", s2);
  for (int h : again.second_accesses(0, 0, "compute", "kernel 'y'")) again.release_after(h, s2);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  std::string error;
  CHECK(again.outcomes(error)[0].how == How::second_access);
  CHECK(error.empty());
  cudaStreamDestroy(s);
  cudaStreamDestroy(s2);
}
