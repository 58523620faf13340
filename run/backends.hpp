// The parts of a command that need more than the simulator: runs on GPUs (CUDA, cuBLASLt,
// NCCL) and processes sharing a command under an MPI launcher. `shardcheck` links none of
// them, so it starts in milliseconds and a command on the simulator never loads them; a
// command that needs them is handed, its arguments unchanged, to `shardcheck-gpu` beside it,
// which links them and installs them here before it parses (run/install_backends.hpp).
//   if (backends().run_on_gpu) return backends().run_on_gpu(files, args, runs);
//   return hand_off("--backend gpu");
#pragma once

#include <string>
#include <vector>

#include "run/gpu_runs.hpp"
#include "run/processes.hpp"

namespace shardcheck::run {

struct Backends {
  int (*run_on_gpu)(const std::vector<LoadedScenario>&, const GpuArgs&, int) = nullptr;
  int (*compare_on_gpu)(const LoadedScenario&, const GpuArgs&, const std::string&, int) = nullptr;
  // MPI: this process's place in the launch (initializing MPI), and every process's bytes.
  Processes (*start_processes)() = nullptr;
  std::vector<std::string> (*all_gather)(const std::string&) = nullptr;
};
// What this binary has: empty in `shardcheck`, filled in `shardcheck-gpu`.
Backends& backends();

// The command line, for hand_off to repeat.
void remember_command_line(int argc, char** argv);

// Replaces this process with `shardcheck-gpu` (beside this binary, or in ../libexec/shardcheck)
// run with the same arguments, so `needs` ("--backend gpu", "an MPI launch") is served. Returns
// only when it cannot: kBadInput after saying that this build has no such binary, or
// kInternalError when it exists but cannot be started.
int hand_off(const std::string& needs);
// Whether hand_off would find a binary to hand to.
bool can_hand_off();
// In the binary handed to: the command name of the one that handed the command over (for
// reproducer lines); "" when this process was started directly.
std::string handed_command_name();

// Whether the environment says this process is one of several of an MPI launch (see
// run/processes.hpp): then `shardcheck` hands the command to `shardcheck-gpu`.
bool launched_as_several();

}  // namespace shardcheck::run
