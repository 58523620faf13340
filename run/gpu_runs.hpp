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
  bool force_race = false;                 // hold each race's first access until its second has run
  double hold_deadline = 10;               // seconds a hold may wait on the device
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

// Forced replay (`--force-race`): for every stream_race the simulator finds in the files, replays
// its schedule (file and seed) and returns the pair to enforce on hardware: the access the program
// issued first waits until the other has run. Each access is named by its rank, stream,
// operation and occurrence (the how-manyth operation of that name on that stream), which do not
// depend on the schedule. A pair found in two files is listed once, from the first.
struct ForcedHold {
  int first_rank = 0, second_rank = 0;
  std::string first_stream, second_stream, first_op, second_op;
  uint32_t first_occurrence = 0, second_occurrence = 0;
  // A reuse race: the buffer the first access uses was freed and its block went to the
  // second's (both on the first's rank); empty otherwise.
  std::string freed_buffer, reusing_buffer;
  std::string scenario;
  uint64_t seed = 0;
  bool operator==(const ForcedHold& o) const;
};
std::vector<ForcedHold> forced_holds(const std::vector<LoadedScenario>& scenarios);

// What a file's runs on hardware showed.
struct HardwareTally {
  int runs = 0;
  int differing = 0;  // runs whose final values differ from a correctly ordered execution
  int faults = 0;     // runs the program stopped (collectives that differ, a deadlock)
  int other = 0;      // the judge's findings that are not a difference in values
  int forced = 0;     // --force-race: runs in which a hold was released by its second access
};
// The expectation held to hardware. A difference in values stands for the file's value findings
// (a race, a numerics or replica divergence, an uninitialized read), a run the program stopped
// for its collective findings, and the judge's other findings for themselves. A file expecting
// no findings is met when no run shows anything. A file expecting findings is met when some run
// shows one, except a race: whether it changes values depends on timing, so under --force-race
// every run must differ, and without it a race that changed nothing is `unconfirmed`
// (reported, not a failure: nothing forced its order).
struct HardwareVerdict {
  enum class Is : uint8_t { met, not_met, unconfirmed, no_expectation } is = Is::met;
  std::string text;  // "expected stream_race; forced, 10 of 10 runs differ"
};
HardwareVerdict hardware_verdict(const core::Expectation& e, const HardwareTally& t, bool forced);

// Runs each scenario `runs` times on the GPU: trace programs against the simulator's
// in-order values, training against the reference. Returns the exit code.
int run_on_gpu(const std::vector<LoadedScenario>& scenarios, const GpuArgs& a, int runs);
// `compare --backend gpu`: returns the exit code.
int compare_on_gpu(const LoadedScenario& s, const GpuArgs& a, const std::string& against, int steps);

}  // namespace shardcheck::run
