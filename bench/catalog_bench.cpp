// The bug catalog on the simulator: schedules explored per second on every catalog
// scenario (buggy and fixed, each under its own policy, seed and number of runs), and the time
// from loading a buggy scenario to its first finding, as `shardcheck explore FILE` does it
// (load, single-rank reference, then schedules from the file's seed until one finds something).
// Thread scaling: schedules per second of one exploration at 1, 2, 4, ... threads (`-j N`)
// up to the core count.
#include <benchmark/benchmark.h>

#include <thread>

#include "bench/bench_main.hpp"
#include "bench/bench_support.hpp"

using namespace shardcheck;

namespace {

// Every schedule the file asks for, no early stop; the reference is computed beforehand since
// every schedule shares it. A scenario that misses its expectation is an error, not a figure.
void explore_catalog(benchmark::State& state, const std::string& file) {
  run::LoadedScenario s = bench::load_or_exit(file);
  if (s.training()) s.training()->ensure_reference();
  int64_t schedules = 0, ops = 0;
  for (auto _ : state) {
    const run::ScenarioOutcome o = run::run_scenario(s, {});
    if (!o.explored.error.empty() || !o.judged.met) {
      state.SkipWithError(("expectation not met: " + o.explored.error).c_str());
      break;
    }
    schedules += o.explored.runs_done;
    ops += o.explored.ops;
  }
  state.counters["schedules"] =
      benchmark::Counter(static_cast<double>(schedules), benchmark::Counter::kAvgIterations);
  state.counters["schedules_per_s"] =
      benchmark::Counter(static_cast<double>(schedules), benchmark::Counter::kIsRate);
  state.counters["ops_per_s"] = benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
}

// From the file to the first finding, cold: each iteration loads the scenario afresh (so the
// single-rank reference is computed inside the timing) and explores from the file's seed
// under the file's policy, stopping at the first schedule with a finding.
void first_detection(benchmark::State& state, const std::string& file) {
  int first_schedule = 0;
  std::string kinds;
  for (auto _ : state) {
    const run::LoadedScenario s = bench::load_or_exit(file);
    run::ScheduleOverrides o;
    o.stop_at_first = true;
    const run::ScenarioOutcome out = run::run_scenario(s, o);
    if (out.explored.first_hit < 0 || !out.explored.error.empty()) {
      state.SkipWithError("no finding in the file's schedules");
      break;
    }
    first_schedule = out.explored.first_hit + 1;
    kinds = core::kinds_to_string(out.judged.found);
  }
  state.counters["schedules"] = first_schedule;
  state.SetLabel(kinds);
}

// One exploration of a training scenario's schedules (a fixed number, no early stop) on
// `state.range(0)` threads: the schedules per second `shardcheck run -j N` gets. The
// reference is computed beforehand, as every schedule shares it.
constexpr const char* kScalingFile = "zero1-missing-no-sync-fixed.yaml";
constexpr int kScalingRuns = 48;

void thread_scaling(benchmark::State& state) {
  run::LoadedScenario s = bench::load_or_exit(bench::source_dir() + "/scenarios/catalog/" + kScalingFile);
  if (s.training()) s.training()->ensure_reference();
  int64_t schedules = 0;
  for (auto _ : state) {
    run::ScheduleOverrides o;
    o.runs = kScalingRuns;
    o.jobs = static_cast<int>(state.range(0));
    const run::ScenarioOutcome out = run::run_scenario(s, o);
    if (!out.explored.error.empty() || !out.judged.met) {
      state.SkipWithError(("expectation not met: " + out.explored.error).c_str());
      break;
    }
    schedules += out.explored.runs_done;
  }
  state.counters["schedules_per_s"] =
      benchmark::Counter(static_cast<double>(schedules), benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  bench::keep_freed_memory();
  {
    benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark("BM_ThreadScaling", thread_scaling)
                                            ->Unit(benchmark::kMillisecond)
                                            ->UseRealTime();
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    for (int threads = 1; threads < cores; threads *= 2) b->Arg(threads);
    b->Arg(cores);
  }
  for (const std::string& f : bench::catalog_files(false)) {
    benchmark::RegisterBenchmark(("BM_Explore/" + bench::stem(f)).c_str(), explore_catalog, f)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const std::string& f : bench::catalog_files(true)) {
    benchmark::RegisterBenchmark(("BM_FirstDetection/" + bench::stem(f)).c_str(), first_detection, f)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
