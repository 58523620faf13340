// `--backend gpu` for run and compare: the runs themselves and the race sites the simulator
// picks for them. In a build without nvcc they say that the backend is not built.
#pragma once

#include <string>
#include <vector>

#include "run/scenario.hpp"

namespace shardcheck::run {

struct GpuArgs {
  std::string backend = "sim";
  std::string comm = "local";              // local | nccl
  std::string alloc;                       // caching | async; empty: the scenario's allocator
  int64_t amplify = 0;                     // spin cycles before each delayed operation
  std::string amplify_at = "collectives";  // collectives | race
};

// An operation to delay on hardware: of the two accesses of a race the simulator found, the
// one its program issued first.
struct RaceSite {
  int rank = 0;
  std::string stream;
  std::string op;        // core::op_name
  std::string scenario;  // where the simulator found it
  uint64_t seed = 0;     // and with which schedule
  bool operator==(const RaceSite& o) const { return rank == o.rank && stream == o.stream && op == o.op; }
};
// Explores each scenario on the simulator (its own policy, seed and runs) and returns the
// earlier-issued access of every stream_race found, once each (the same operation found in two
// files is listed once, from the first).
std::vector<RaceSite> race_sites(const std::vector<LoadedScenario>& scenarios);

// Runs each scenario `runs` times on the GPU: trace programs against the simulator's
// in-order values, training against the reference. Returns the exit code.
int run_on_gpu(const std::vector<LoadedScenario>& scenarios, const GpuArgs& a, int runs);
// `compare --backend gpu`: returns the exit code.
int compare_on_gpu(const LoadedScenario& s, const GpuArgs& a, const std::string& against, int steps);

}  // namespace shardcheck::run
