// Training on the simulator with every detector and the training oracle on: one step of ZeRO-3
// on 8 ranks with TinyLM of 12 layers and 4 microbatches, and how the time of that run grows
// with the number of ranks (1 to 64, 12 layers) and of layers (1 to 96, 8 ranks). The summary
// fits the growth exponent b of time ~ n^b to each sweep.
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/resource.h>

#include <fstream>
#include <string>

#include "bench/bench_main.hpp"
#include "bench/bench_support.hpp"

using namespace shardcheck;

namespace {

// One run: initialization (the initial broadcast included), `steps` training steps of 4
// microbatches each, the optimizer step, and the oracle's comparison with the single-rank
// reference after every step.
void run_training(benchmark::State& state, const bench::TrainingShape& shape, bool detectors = true) {
  auto ts = bench::training_state(shape);
  sim::Options options = bench::sim_options(shape.dp);
  options.detectors = detectors;
  int64_t ops = 0, steps = 0;
  for (auto _ : state) {
    const run::TrainingRun r = run::run_training(*ts, options);
    if (!r.result.error.empty()) {
      state.SkipWithError(r.result.error.c_str());
      break;
    }
    if (!r.result.completed || !r.result.findings.empty()) {
      state.SkipWithError("the benchmark run must complete clean");
      break;
    }
    ops += r.result.ops_executed;
    steps += r.result.steps;
  }
  state.counters["ranks"] = shape.dp;
  state.counters["layers"] = shape.layers;
  state.counters["ops_per_run"] =
      benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kAvgIterations);
  state.counters["sched_steps_per_run"] =
      benchmark::Counter(static_cast<double>(steps), benchmark::Counter::kAvgIterations);
  state.counters["ops_per_s"] = benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
}

// The headline: ZeRO-3, 8 ranks, 12 layers, 4 microbatches, one step.
void BM_TrainingStep_Zero3(benchmark::State& state) { run_training(state, {.dp = 8, .layers = 12}); }

// The same with the simulator's detectors off (the oracle still judges the run): what the
// race, order and deadlock detectors cost on a real workload.
void BM_TrainingStep_Zero3_DetectorsOff(benchmark::State& state) {
  run_training(state, {.dp = 8, .layers = 12}, false);
}

// The same run over 1, 2, 4, ..., 64 ranks (dp), 12 layers.
void BM_Scaling_Ranks(benchmark::State& state) {
  run_training(state, {.dp = static_cast<int>(state.range(0)), .layers = 12});
}

// The same run over 1, 3, 6, ..., 96 layers, 8 ranks.
void BM_Scaling_Layers(benchmark::State& state) {
  run_training(state, {.dp = 8, .layers = static_cast<int>(state.range(0))});
}

// The single-rank reference the oracle compares against: computed once per scenario (every
// schedule explored shares it), so the runs above exclude it; this is its cost.
void BM_Reference_Zero3(benchmark::State& state) {
  auto ts = bench::training_state({.dp = 8, .layers = 12});
  for (auto _ : state) {
    core::ReferenceResult r = core::run_reference(ts->setup.config, ts->setup.dp);
    benchmark::DoNotOptimize(r.steps.data());
  }
}

// One training step on 1024 simulated ranks, every detector and the oracle on: a file of
// scenarios/scale (ZeRO-3 on dp = 1024, or HSDP on 32 x 32), TinyLM of 12 layers, one
// microbatch of one sequence, exact mode. Its reference is computed before the timing.
// peak_rss_gib is the process's peak resident memory during this benchmark: the peak is reset
// first (Linux's /proc/self/clear_refs, after returning freed memory), so the step that runs
// second does not report the first one's; where the reset is refused, the peak since the process started
// (getrusage).
double peak_rss_gib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / (1024.0 * 1024.0);  // kB
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0);
}

void reset_peak_rss() {
  malloc_trim(0);  // what an earlier benchmark freed goes back to the system first
  std::ofstream("/proc/self/clear_refs") << "5";
}

void run_scale_file(benchmark::State& state, const char* file) {
  reset_peak_rss();
  run::LoadedScenario s = bench::load_or_exit(bench::source_dir() + "/scenarios/scale/" + file);
  s.training()->ensure_reference();
  sim::Options options = s.options;
  int64_t ops = 0;
  for (auto _ : state) {
    const run::TrainingRun r = run::run_training(*s.training(), options);
    if (!r.result.error.empty() || !r.result.completed || !r.result.findings.empty()) {
      state.SkipWithError("the 1024-rank step must complete clean");
      break;
    }
    ops += r.result.ops_executed;
  }
  state.counters["ranks"] = options.ranks;
  state.counters["ops_per_s"] = benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
  state.counters["peak_rss_gib"] = peak_rss_gib();
}

void BM_ScaleStep_Zero3_1024(benchmark::State& state) { run_scale_file(state, "zero3-1024.yaml"); }
void BM_ScaleStep_Hsdp_32x32(benchmark::State& state) { run_scale_file(state, "hsdp-32x32.yaml"); }

}  // namespace

// Up to a minute each: one iteration, one repetition, whatever --benchmark_repetitions says.
// HSDP first: each then reads its own peak memory (the ZeRO-3 step's is the larger).
BENCHMARK(BM_ScaleStep_Hsdp_32x32)->Iterations(1)->Repetitions(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK(BM_ScaleStep_Zero3_1024)->Iterations(1)->Repetitions(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK(BM_TrainingStep_Zero3)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TrainingStep_Zero3_DetectorsOff)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Reference_Zero3)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Scaling_Ranks)->RangeMultiplier(2)->Range(1, 64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Scaling_Layers)
    ->Arg(1)
    ->Arg(3)
    ->Arg(6)
    ->Arg(12)
    ->Arg(24)
    ->Arg(48)
    ->Arg(96)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
SHARDCHECK_BENCHMARK_MAIN()
