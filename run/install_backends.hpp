// What `shardcheck-gpu` links beyond the simulator, and install_backends, which its main calls
// before parsing so that the commands find them (run/backends.hpp).
//   int main(int argc, char** argv) { shardcheck::run::install_backends(); ... }
#pragma once

#include <string>
#include <vector>

#include "run/gpu_runs.hpp"
#include "run/processes.hpp"

namespace shardcheck::run {

// Fills backends() with what this build has: the GPU commands where nvcc was found, MPI where
// MPI was.
void install_backends();

// The GPU backend's commands (run/gpu_commands.cpp).
int gpu_run_on_gpu(const std::vector<LoadedScenario>& scenarios, const GpuArgs& a, int runs);
int gpu_compare_on_gpu(const LoadedScenario& s, const GpuArgs& a, const std::string& against, int steps);

// MPI (run/processes_mpi.cpp).
Processes mpi_start_processes();
std::vector<std::string> mpi_all_gather(const std::string& mine);

}  // namespace shardcheck::run
