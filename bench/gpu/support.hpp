// Shared pieces of the GPU measurement programs (gpu_measure: one GPU; gpu_multi: NCCL
// across GPUs): the TinyLM configurations they time, the meshes each strategy runs on, a
// training run on the CUDA backend with its per-step losses and step times.
#pragma once

#include <string>
#include <vector>

#include "core/layout/mesh.hpp"
#include "core/strategies/training_config.hpp"
#include "gpu/runtime.hpp"

namespace shardcheck::bench {

struct Timed {
  double seconds = 0;          // wall time of the whole run, set-up included
  std::vector<double> losses;  // per step, mean over microbatches and dp ranks
  std::vector<double>
      step_seconds;  // per step: from the previous step's end to this one's, on the slowest rank
  gpu::KernelProfile profile;
  std::vector<gpu::CollectiveSample> collectives;  // rank 0's, when recorded
};

// Every strategy, DistOpt first.
inline constexpr core::Strategy kAllStrategies[] = {
    core::Strategy::distopt,     core::Strategy::no_shard,           core::Strategy::optim,
    core::Strategy::optim_grads, core::Strategy::optim_grads_params, core::Strategy::hsdp,
    core::Strategy::hfsdp};

// TinyLM at vocab 8192, hidden 1024, 8 layers, sequence 1024, micro-batch 2, 4 microbatches,
// bf16 parameters with fp32 main weights.
core::TrainingConfig tinylm_config(core::Strategy s);
// (dp) for one-dimensional strategies, (dp_outer 2, dp_inner ranks/2) for HSDP and HFSDP.
std::vector<core::Axis> mesh_for(core::Strategy s, int ranks);
// Trains `steps` steps on the mesh; options.ranks is set from the mesh.
Timed train(core::TrainingConfig c, const std::vector<core::Axis>& axes, int steps, gpu::GpuOptions options);
// Seconds per step: the median over `steps` steps that follow two warm-up steps (communicators
// made, caching allocator filled). Each step ends with the device synchronized, as the
// trainer's steps do.
struct StepTime {
  double median = 0, min = 0, max = 0;  // seconds
};
StepTime step_time(const core::TrainingConfig& c, const std::vector<core::Axis>& axes,
                   const gpu::GpuOptions& options, int steps = 7);
double step_seconds(const core::TrainingConfig& c, const std::vector<core::Axis>& axes,
                    const gpu::GpuOptions& options, int steps = 7);
double max_abs_delta(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace shardcheck::bench
