// Exploring schedules: run a program under N seeds of a policy (seed, seed+1, ...), merge the
// findings (each once, with the first seed that found it), and optionally stop at the first
// finding. Also the single replay of one seed with its full trace.
//   ExploreResult r = explore(program, {.base = options, .runs = 200});
//   Replay one = replay(program, options_with_seed);   // one.log for a Chrome trace
#pragma once

#include <functional>
#include <memory>

#include "core/trace_log.hpp"
#include "sim/world.hpp"

namespace shardcheck::sim {

using Program = std::function<core::Task<>(core::Runtime&)>;

struct ExploreOptions {
  Options base;
  int runs = 1;
  bool stop_at_first = false;
};

struct ExploreResult {
  std::vector<core::Finding> findings;
  int runs_done = 0;
  int first_hit = -1;       // index of the first run with a finding
  int64_t steps = 0;        // scheduler steps over all runs
  int64_t ops = 0;          // stream operations over all runs
  std::vector<uint64_t> digests;
  std::string error;        // an internal error in some run
  uint64_t error_seed = 0;
};

// Steps of one in_order run with detectors off: the PCT change-point range.
int64_t measure_steps(const Program& program, Options base);

ExploreResult explore(const Program& program, const ExploreOptions& options);

struct Replay {
  std::unique_ptr<World> world;
  RunResult result;
  core::TraceLog log;
};
Replay replay(const Program& program, Options options);

// The timeline of a finished run, for reports (the world must have record_trace on).
core::TraceLog trace_log(const World& world, const std::string& title);

}  // namespace shardcheck::sim
