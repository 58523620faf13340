// The single-rank reference trainer: TinyLM on one rank with full, unsharded parameters. For
// each step it runs every data-parallel rank's microbatches itself, one after another, with
// the same kernels and the same per-(rank, microbatch) gradient contributions (grid-rounded
// in exact mode) that a sharded run reduces across ranks, then takes the optimizer step.
// It is the numerics oracle's ground truth.
//   ReferenceResult ref = run_reference(config, /*dp*/ 4);
//   ref.steps[2].main[logical]   // fp32 main weights after step 2
#pragma once

#include <vector>

#include "core/base/cancel.hpp"
#include "core/strategies/training_config.hpp"

namespace shardcheck::core {

struct ReferenceStep {
  std::vector<std::vector<float>> main;   // per logical parameter, after the step
  std::vector<std::vector<float>> grads;  // per logical parameter, the step's final gradient
  std::vector<float> losses;              // per (dp rank, microbatch): rank-major
  double loss = 0;                        // their mean
  double grad_norm = 0;                   // before clipping
};

struct ReferenceResult {
  std::vector<std::vector<float>> initial;  // per logical parameter
  std::vector<ReferenceStep> steps;
  double entropy_rate = 0;  // the data's: the loss a perfect model reaches (nats)
};

// `cancel` is polled before every kernel and every microbatch: once it is raised the
// reference stops with core::Cancelled, so a long reference does not hold up an interrupt.
ReferenceResult run_reference(const TrainingConfig& config, int dp, CancelToken cancel = {});

}  // namespace shardcheck::core
