// The GPU backend's options on `run` and `compare`.
#include "cli/commands.hpp"

namespace shardcheck::cli {

void add_gpu_options(CLI::App* cmd, GpuArgs& a) {
  cmd->add_option("--backend", a.backend, "sim: the simulator (default); gpu: CUDA GPUs")
      ->check(one_of({"sim", "gpu"}));
  cmd->add_option("--comm", a.comm, "gpu: local (N ranks on one GPU, default) or nccl (one rank per GPU)")
      ->check(one_of({"local", "nccl"}));
  cmd->add_option(
         "--alloc", a.alloc,
         "gpu: caching (PyTorch's semantics) or async (cudaMallocAsync); default: the scenario's allocator")
      ->check(one_of({"caching", "async"}));
  cmd->add_option("--amplify", a.amplify,
                  "gpu: spin this many cycles on a communication stream before each collective")
      ->transform(in_range(0, INT64_MAX));
  cmd->add_option("--amplify-at", a.amplify_at,
                  "gpu: collectives (default), or race: spin only before the earlier-issued access of each "
                  "race the simulator finds in the "
                  "given files, in every file")
      ->check(one_of({"collectives", "race"}));
  cmd->add_flag(
      "--force-race", a.force_race,
      "gpu: for each race the simulator finds in the given files, hold its first access on the device "
      "until its second has run, so the racing order happens in every run (--comm local)");
  cmd->add_option("--hold-deadline", a.hold_deadline,
                  "gpu: seconds a --force-race hold may wait on the device before the run ends with an error "
                  "(default 10)");
}

}  // namespace shardcheck::cli
