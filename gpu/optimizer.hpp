// Optimizer steps (core::kernel::Adam, core::kernel::Sgd), bit for bit with the CPU
// reference. The host turns the double hyperparameters into the float constants the CPU uses
// (adam_constants / sgd_constants, same expressions, same std::pow); the device reads the
// optional f64 clip coefficient itself, so a launch never waits for the device.
//   gpu::launch_adam(param, grad, m, v, coef_or_null, gpu::adam_constants(hyper), stream);
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernels/kernels.hpp"
#include "gpu/operand.hpp"

namespace shardcheck::gpu {

struct AdamConstants {
  float b1, b2, one_minus_b1, one_minus_b2, lr, eps, weight_decay;
  float bias_correction1, bias_correction2;  // 1 - b^step, computed in double
};
AdamConstants adam_constants(const core::kernel::Adam& k);

struct SgdConstants {
  float lr, weight_decay;
};
SgdConstants sgd_constants(const core::kernel::Sgd& k);

// In place: param, m and v are read and written. coef: a device f64 scalar, or null for none.
void launch_adam(Operand param, Operand grad, Operand m, Operand v, const double* coef, AdamConstants c,
                 cudaStream_t stream);
// In place: param = param - lr * (grad*coef + weight_decay*param).
void launch_sgd(Operand param, Operand grad, const double* coef, SgdConstants c, cudaStream_t stream);

}  // namespace shardcheck::gpu
