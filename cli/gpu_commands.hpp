// `--backend gpu` for run and compare: options, and the runs themselves. In a build without
// nvcc the options exist and say that the backend is not built.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli/driver.hpp"

namespace shardcheck::cli {

struct GpuArgs {
  std::string backend = "sim";
  std::string comm = "local";  // local | nccl
  std::string alloc = "caching";
  int64_t amplify = 0;  // spin cycles before each collective on its stream
};

void add_gpu_options(CLI::App* cmd, GpuArgs& a);
// Runs each scenario `runs` times on the GPU: trace programs against the simulator's
// in-order values, training against the reference. Returns the exit code.
int run_on_gpu(const std::vector<LoadedScenario>& scenarios, const GpuArgs& a, int runs);
// `compare --backend gpu`: returns the exit code.
int compare_on_gpu(const LoadedScenario& s, const GpuArgs& a, const std::string& against, int steps);

}  // namespace shardcheck::cli
