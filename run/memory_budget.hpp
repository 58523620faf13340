// How many schedules may run at once in the memory this process may use. A captured program
// is loaded once and shared read-only by every worker thread; each schedule in flight adds
// its own world (shadow memory, streams, the operations issued), which grows with the
// program. The bound per schedule is stated here and held by tests/cli/memory_bounds_test.cpp;
// -j (or its default, every core) is capped so that the workers fit.
//   const JobsCap cap = cap_jobs(s, threads);   // cap.jobs <= threads, >= 1
//   if (!cap.note.empty()) std::cerr << cap.note << "\n";
#pragma once

#include <cstdint>
#include <string>

#include "run/scenario.hpp"

namespace shardcheck::run {

// The stated memory bound of one schedule of a captured program, beside the loaded program:
// bytes per record and per access range summed over the ranks. Measured on synthetic
// data-parallel captures (bench/gen_capture.py, 0.77 ranges per record): about 255 bytes per
// record all told.
inline constexpr int64_t kWorkerBytesPerRecord = 320;
inline constexpr int64_t kWorkerBytesPerRange = 128;

// The stated bound of one schedule of `s` in flight; 0 where it is small and bounded by the
// file's own limits (trace and training files).
int64_t worker_bytes(const LoadedScenario& s);

// The memory this process may still take: the least of the system's available memory
// (MemAvailable), its cgroup's limit less its use, and its address-space limit (ulimit -v)
// less its size. INT64_MAX where none is known.
int64_t available_memory();

// `threads` capped so that that many workers of `per_worker` bytes fit in `available`; at
// least 1, since one schedule must run to check anything.
int jobs_within(int64_t per_worker, int64_t available, int threads);

struct JobsCap {
  int jobs = 1;
  std::string note;  // set when the cap took threads away: why, with the figures
};
// `threads` (already resolved and at most the schedules to run) capped for `s` in this
// process's memory, shared with `sharing - 1` other scenarios running side by side.
JobsCap cap_jobs(const LoadedScenario& s, int threads, int sharing = 1);

}  // namespace shardcheck::run
