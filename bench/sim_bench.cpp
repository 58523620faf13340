// Simulator throughput: stream operations executed per second of host time, with all
// detectors on and off, on a program shaped like a training step (allocation churn, kernels
// on two streams with event ordering, reduce-scatters and all-gathers every few kernels).
// In the main runs each rank's tensors hold 256 elements per rank of the world (a model that
// grows with the mesh), so the arithmetic behind an operation grows with the rank count; the
// shadow-only runs (no values, every detector on) measure what the simulator itself spends per
// operation; the fixed-model runs keep the 2-rank program's tensors (512 elements, a shard of
// 512 / R) at every rank count, as a fixed model sharded over more ranks does, so the data
// behind an operation stays the same and what is left to grow is the simulator's own cost.
#include <benchmark/benchmark.h>

#include "bench/bench_main.hpp"
#include "sim/world.hpp"

using namespace shardcheck;

namespace {

// `full` elements in every rank's weights, activations and gradients, a shard of full / R.
core::Task<> step_program(core::Runtime& rt, int iterations, int64_t full) {
  const core::StreamId compute = rt.stream("compute"), comm = rt.stream("comm");
  std::vector<int> members(rt.world_size());
  for (int r = 0; r < rt.world_size(); ++r) members[r] = r;
  const core::GroupId dp = rt.group("dp", members);
  const int64_t n = full, s = full / rt.world_size();
  const core::BufferId weights = co_await rt.alloc(n * 4, compute, "weights");
  co_await rt.launch(core::kernels::fill(compute, core::TensorRef::f32(weights, 0, n), 0.5, "init"));
  const core::EventId done = rt.create_event("grad_ready");
  for (int i = 0; i < iterations; ++i) {
    const core::BufferId act = co_await rt.alloc(n * 4, compute, "act");
    co_await rt.launch(core::kernels::scale(compute, core::TensorRef::f32(weights, 0, n),
                                            core::TensorRef::f32(act, 0, n), 1.5, "forward"));
    const core::BufferId grad = co_await rt.alloc(n * 4, comm, "grad");
    co_await rt.launch(core::kernels::add(compute, core::TensorRef::f32(act, 0, n),
                                          core::TensorRef::f32(weights, 0, n),
                                          core::TensorRef::f32(grad, 0, n), "backward"));
    co_await rt.record(done, compute);
    co_await rt.wait_event(comm, done);
    const core::BufferId shard = co_await rt.alloc(s * 4, comm, "shard");
    co_await rt.collective({core::CollectiveKind::reduce_scatter, dp, comm, core::TensorRef::f32(grad, 0, n),
                            core::TensorRef::f32(shard, 0, s), core::ReduceOp::avg, 0, "grad"});
    co_await rt.collective({core::CollectiveKind::all_gather, dp, comm, core::TensorRef::f32(shard, 0, s),
                            core::TensorRef::f32(grad, 0, n), core::ReduceOp::sum, 0, "params"});
    co_await rt.wait_stream(compute, comm);
    co_await rt.free(shard);
    co_await rt.free(grad);
    co_await rt.free(act);
  }
  co_await rt.sync_device();
}

constexpr int64_t kShardElements = 256;  // the growing model: 256 elements per rank
constexpr int64_t kFixedElements = 512;  // the fixed model: the 2-rank program's size

void run(benchmark::State& state, bool detectors, bool values = true, bool fixed_model = false) {
  const int ranks = static_cast<int>(state.range(0));
  const int64_t full = fixed_model ? kFixedElements : kShardElements * ranks;
  if (full % ranks != 0) {
    state.SkipWithError("the fixed model's tensors must divide among the ranks");
    return;
  }
  int64_t ops = 0;
  for (auto _ : state) {
    sim::Options o;
    o.ranks = ranks;
    o.detectors = detectors;
    o.values = values;
    o.seed = 7;
    sim::World w(o);
    const sim::RunResult r = w.run([full](core::Runtime& rt) { return step_program(rt, 200, full); });
    if (!r.completed || !r.findings.empty()) state.SkipWithError("the benchmark program must run clean");
    ops += r.ops_executed;
  }
  state.SetItemsProcessed(ops);
  state.counters["ops_per_s"] = benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
}

void BM_SimOps_DetectorsOn(benchmark::State& s) { run(s, true); }
void BM_SimOps_DetectorsOff(benchmark::State& s) { run(s, false); }
void BM_SimOps_DetectorsOn_ShadowOnly(benchmark::State& s) { run(s, true, false); }
void BM_SimOps_DetectorsOn_FixedModel(benchmark::State& s) { run(s, true, true, true); }
void BM_SimOps_DetectorsOff_FixedModel(benchmark::State& s) { run(s, false, true, true); }

// 2, 8 and 64 ranks, and 256 where the program stays quick enough to repeat.
void up_to_64(benchmark::internal::Benchmark* b) {
  b->Arg(2)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
}
void up_to_256(benchmark::internal::Benchmark* b) {
  up_to_64(b);
  b->Arg(256);
}

}  // namespace

BENCHMARK(BM_SimOps_DetectorsOn)->Apply(up_to_64);
BENCHMARK(BM_SimOps_DetectorsOff)->Apply(up_to_64);
BENCHMARK(BM_SimOps_DetectorsOn_ShadowOnly)->Apply(up_to_256);
BENCHMARK(BM_SimOps_DetectorsOn_FixedModel)->Apply(up_to_256);
BENCHMARK(BM_SimOps_DetectorsOff_FixedModel)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
SHARDCHECK_BENCHMARK_MAIN()
