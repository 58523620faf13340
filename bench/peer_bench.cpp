// shardcheck against the check engineers write today. The same question — does ZeRO-1 train
// TinyLM (vocab 64, hidden 16, 4 layers, seq 8) on 4 data-parallel ranks exactly as the
// baseline does, over 3 steps of 4 microbatches? — answered twice in one run:
//   shardcheck: `compare scenarios/training/zero1-exact.yaml --against distopt`, through the
//     library call the command makes (and, separately, as a process);
//   peer: bench/peer/gloo_equivalence.py, torch.distributed on gloo with 4 CPU processes,
//     timed as a whole process and, from its own report, from the process group being up to
//     its last assertion.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/bench_main.hpp"
#include "bench/bench_support.hpp"
#include "run/compare.hpp"

using namespace shardcheck;

namespace {

std::string scenario() { return bench::source_dir() + "/scenarios/training/zero1-exact.yaml"; }

std::string peer_python() {
  if (const char* env = std::getenv("SHARDCHECK_PEER_PYTHON"); env && *env) return env;
  return SHARDCHECK_PEER_PYTHON;
}

// In-process: load the file, train ZeRO-1 and DistOpt on the simulator (every detector and the
// training oracle on, the single-rank reference computed), compare weights after every step.
void BM_Compare_Shardcheck(benchmark::State& state) {
  for (auto _ : state) {
    const run::LoadedScenario s = bench::load_or_exit(scenario());
    const run::CompareResult r = run::compare_on_sim(s, "distopt", 3);
    if (!r.error.empty() || !r.first_divergent.empty() || r.ours.size() != 3) {
      state.SkipWithError("ZeRO-1 and DistOpt must agree bit for bit");
      break;
    }
  }
}

// The whole process, as an engineer runs it: `shardcheck compare FILE --against distopt`.
void BM_Compare_ShardcheckProcess(benchmark::State& state) {
  const std::string cmd =
      std::string(SHARDCHECK_CLI) + " compare " + scenario() + " --against distopt --steps 3 >/dev/null";
  for (auto _ : state) {
    if (std::system(cmd.c_str()) != 0) {
      state.SkipWithError(("failed: " + cmd).c_str());
      break;
    }
  }
}

// The peer as a process (python start, torch import, 4 spawned ranks, both trainings, the
// assertions); its own report gives the time from the process group being up to the end.
void BM_Peer_GlooEquivalence(benchmark::State& state) {
  const std::string out =
      (std::filesystem::temp_directory_path() / ("shardcheck-peer-" + std::to_string(getpid()) + ".json"))
          .string();
  const std::string cmd = peer_python() + " " + bench::source_dir() +
                          "/bench/peer/gloo_equivalence.py --json " + out + " >/dev/null";
  double check_s = 0, setup_s = 0;
  for (auto _ : state) {
    if (std::system(cmd.c_str()) != 0) {
      state.SkipWithError(
          ("the peer failed (needs python3-torch: scripts/install-deps bench): " + cmd).c_str());
      break;
    }
    state.PauseTiming();
    std::ifstream in(out);
    const nlohmann::json j = nlohmann::json::parse(in);
    check_s += j.at("check_s").get<double>();
    setup_s += j.at("setup_s").get<double>();
    state.ResumeTiming();
  }
  std::filesystem::remove(out);
  state.counters["check_s"] = benchmark::Counter(check_s, benchmark::Counter::kAvgIterations);
  state.counters["setup_s"] = benchmark::Counter(setup_s, benchmark::Counter::kAvgIterations);
}

}  // namespace

BENCHMARK(BM_Compare_Shardcheck)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Compare_ShardcheckProcess)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK(BM_Peer_GlooEquivalence)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
SHARDCHECK_BENCHMARK_MAIN()
