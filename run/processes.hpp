// Several shardcheck processes sharing one command, under an MPI launcher (mpirun, srun):
// `run`, `explore` and `props` deal their seeds (and property cases) out to the processes,
// each runs its share on its own threads, and process 0 merges in seed order and prints, so
// the output is the one of a single process. The launch is read from the environment
// (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE, or SLURM_NTASKS with SLURM_PROCID);
// SHARDCHECK_MPI=1 forces MPI on, SHARDCHECK_MPI=0 keeps every process alone.
//   if (processes().count > 1) o.share = share_across_processes(jobs);
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/explore.hpp"

namespace shardcheck::run {

struct Processes {
  int index = 0;  // this process: 0 merges and prints
  int count = 1;
  bool built = false;  // this binary has MPI (shardcheck-gpu, where MPI was found at build time)
};

// The processes of this launch; initializes MPI on the first call when launched with more
// than one (MPI_Finalize runs at exit). Built without MPI, a process launched as one of
// several is told its launcher index and count, and `alone_in_launch` says what to do.
const Processes& processes();
// What the launcher's environment says: this process's index and the count, {0, 1} when it was
// not launched as one of several.
std::pair<int, int> launch_of_environment();
// Built without MPI but launched as one of several: process 0 runs alone and says so on
// stderr; the others return true (they should exit at once, printing nothing).
bool alone_in_launch();

// Every process's bytes, in process order, on every process (a collective: every process
// calls it at the same point).
std::vector<std::string> all_gather(const std::string& mine);

// The sim::Share of this process, with `jobs` threads here (0: every core). The chunk each
// process runs per window is agreed among them (a collective call).
sim::Share share_across_processes(int jobs, bool stop_early);

// An ExploreResult as bytes: counts, digests, errors, and each finding's kind, key, seed and
// occurrences (not its text).
std::string encode(const sim::ExploreResult& r);
sim::ExploreResult decode(const std::string& bytes);

}  // namespace shardcheck::run
