// Running scenarios on the CUDA backend: trace programs (with race replay statistics against
// their program-order run) and training (judged against the reference with the
// tolerance, and compared with DistOpt or the simulator). Built only where nvcc is.
//   GpuTrainingRun r = run_training_gpu(state, options, /*judge*/ true);
#pragma once

#include <string>
#include <vector>

#include "gpu/runtime.hpp"
#include "run/scenario.hpp"
#include "run/training_run.hpp"

namespace shardcheck::run {

struct GpuTrainingRun {
  gpu::GpuRunResult result;
  std::vector<double> losses;  // per step, mean over microbatches and dp ranks
  std::vector<std::vector<std::vector<float>>>
      weights;  // per step, per logical parameter (empty unless judged)
  std::vector<core::Finding> findings;
  double seconds_per_step = 0;
};

// `judge`: capture every step's weights and judge them against the reference (slower).
GpuTrainingRun run_training_gpu(TrainingState& state, const gpu::GpuOptions& options, bool judge);

// The baseline a training run on the GPU is held to. In exact mode every gradient
// contribution is grid-rounded, so sums are exact in any order: every correct strategy is
// bitwise equal to DistOpt on the same communicator (device-local, or NCCL whose ring and tree
// orders then cannot matter), so the baseline is DistOpt, trained once without the scenario's
// mutations, bit for bit: this catches what the simulator's exact mode catches. Otherwise
// (not exact) it is the single-rank reference on the CPU, within the judge's derived
// tolerance, and `weights` stays empty.
struct GpuBaseline {
  bool bitwise = false;
  std::vector<std::vector<std::vector<float>>> weights;  // DistOpt's, per step
  std::string name = "the single-rank reference";
};
GpuBaseline baseline_for(const LoadedScenario& s, const gpu::GpuOptions& options);
// The first main weight of `r` that differs in its bits from the baseline's, or "".
std::string first_weight_difference(const TrainingState& st, const GpuTrainingRun& r, const GpuBaseline& b);

struct GpuTraceRun {
  gpu::GpuRunResult result;
  int buffers_compared = 0;
  int buffers_differing = 0;
  std::string first_difference;  // "rank 0 buffer 'shard' byte 12" or empty
  // Buffers where the program-order run differs from the simulator's in-order run: none for a
  // program without races (the GPU computes what the simulator does).
  int simulator_differing = 0;
};

// Runs a trace program on the GPU and compares every buffer still live at the end with the
// same program run in program order on the GPU (each operation finished before the next is issued;
// GpuOptions::serial), the correctly ordered execution.
GpuTraceRun run_trace_gpu(const LoadedScenario& s, const gpu::GpuOptions& options);

}  // namespace shardcheck::run
