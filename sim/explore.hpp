// Exploring schedules: run a program under N seeds of a policy (seed, seed+1, ...), merge the
// findings (each once, with the first seed that found it), and optionally stop at the first
// finding. Also the single replay of one seed with its full trace. Runs may go on several
// threads (ExploreOptions::jobs); the result does not depend on how many.
//   ExploreResult r = explore(program, {.base = options, .runs = 200, .jobs = 4});
//   Replay one = replay(program, options_with_seed);   // one.log for a Chrome trace
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/base/trace_log.hpp"
#include "sim/world.hpp"

namespace shardcheck::sim {

using Program = std::function<core::Task<>(core::Runtime&)>;

// What one run needs: the program every rank runs, and optionally a step after the run
// (oracles judging what the run left, adding their findings). Built per run, from its world.
struct RunSetup {
  Program program;
  std::function<void(World&, RunResult&)> after;
};
using Factory = std::function<RunSetup(World&)>;
Factory plain(Program program);

struct ExploreResult;

// One of several processes sharing an exploration (run/processes.hpp carries the results
// between them). Seeds are dealt out in windows of `count` chunks of `chunk` seeds; each
// process explores its chunk on its own threads, and every process merges all chunks of a
// window in seed order, so all of them stop at the same seed and the merged result is the
// one of a single process. Findings first seen in another process's chunk arrive without
// their text; process 0 reruns that seed to fill it in.
struct Share {
  int index = 0;
  int count = 1;
  int chunk = 1;  // seeds per process and window: the same on every process
  // Every process's result for its chunk of one window, in process order (this process's
  // own included); other processes' findings may carry kind, key, seed and count only.
  std::function<std::vector<ExploreResult>(const ExploreResult& own)> exchange;
};

struct ExploreOptions {
  Options base;
  int runs = 1;
  bool stop_at_first = false;
  bool stop_at_error = false;  // end at the first run with an internal error
  // Threads running schedules at once (0: one per core). Each run is a world of its own; the
  // results merge in seed order, so the ExploreResult is the same for every value, and a stop
  // (first finding, error) is at the lowest seed that has one: higher seeds still running
  // then are cancelled, as their results would be dropped.
  int jobs = 1;
  // Called after each run is merged, in seed order, with the runs merged and findings so far
  // (from whichever thread merged it; never two calls at once).
  std::function<void(int runs_done, int findings)> progress;
  Share share;  // count > 1: this process runs only its share of the seeds
};

// `jobs`, or one per core (std::thread::hardware_concurrency) when it is 0.
int resolve_jobs(int jobs);

struct ExploreResult {
  std::vector<core::Finding> findings;
  int runs_done = 0;
  int first_hit = -1;         // index of the first run with a finding
  int64_t steps = 0;          // scheduler steps over all runs
  int64_t ops = 0;            // stream operations over all runs
  int64_t collectives = 0;    // collectives and transfers over all runs
  int64_t bytes_checked = 0;  // bytes of accesses checked over all runs
  std::vector<uint64_t> digests;
  std::string error;  // an internal error in some run
  uint64_t error_seed = 0;
  // That run reached the simulator's own bound (RunResult::limit): bad input, not an internal
  // error. Its findings are left out: a cut run proves nothing about the file.
  bool limit = false;
  // Options::cancel was set: exploration ended early. A run it cut short is not counted in
  // runs_done and has no digest, but what its detectors had found is kept: each finding is
  // sound when it is reported, and its seed replays it.
  bool cancelled = false;
};

// Steps of one in_order run with detectors off: the PCT change-point range.
int64_t measure_steps(const Factory& factory, Options base);

ExploreResult explore(const Factory& factory, const ExploreOptions& options);

// One digest for a whole exploration: FNV-1a over its runs' trace digests, in seed order. The
// demo prints it per scenario and the golden tests pin it, so a change that alters any
// schedule of any shipped scenario shows as one differing line.
uint64_t combined_digest(const std::vector<uint64_t>& digests);
inline ExploreResult explore(const Program& p, const ExploreOptions& o) { return explore(plain(p), o); }

struct Replay {
  std::unique_ptr<World> world;
  RunResult result;
  core::TraceLog log;
};
// `timeline` false leaves `log` empty: a caller that shows parts of a long run cuts them
// from the world with a Timeline (below), never building the whole.
Replay replay(const Factory& factory, Options options, bool timeline = true);
inline Replay replay(const Program& p, Options o) { return replay(plain(p), o); }
// One run: the world, its result with the factory's `after` applied (not to a cancelled
// run). An exception from the factory or the run becomes the result's error.
RunResult run_once(World& world, const Factory& factory);

// The timeline of a finished run, for reports (the world must have record_trace on).
core::TraceLog trace_log(const World& world, const std::string& title);
// A finished run's timeline, to cut windows from: what every window shares (which operation
// begins or ends each lifetime, each memory pool's changes) is computed once, so a window
// costs its own slices, not the run's.
//   Timeline t(*replay.world);  core::TraceLog w = t.log("title", first, last);
class Timeline {
 public:
  explicit Timeline(const World& world);
  // The slices of events [first, last) of world.trace(), one each, with the marks and memory
  // counters of their span (each pool's counter carried in at its start); the whole timeline
  // when the range is the whole run.
  core::TraceLog log(const std::string& title, size_t first, size_t last) const;

 private:
  struct Change {
    int64_t step = 0;
    int rank = 0;
    int stream = 0;
    int64_t bytes = 0;  // the pool's live bytes after it
  };
  core::TraceLog::Counter counter(size_t change, int64_t at) const;
  void add_counters(core::TraceLog& log, int64_t lo, int64_t hi) const;

  const World& w_;
  std::unordered_map<uint32_t, int64_t> lifetime_of_op_;  // alloc and free ops -> their lifetime
  std::vector<Change> changes_;                           // in (step, rank, stream) order
  std::vector<std::vector<size_t>> pools_;  // each pool's changes (indices, ascending), by first change
};

}  // namespace shardcheck::sim
