// Adam and SGD: one thread per element, fp32, the CPU's operation order, every product and
// sum rounded separately (explicit _rn intrinsics), IEEE sqrt and division.
#include <cmath>

#include "gpu/device_util.cuh"
#include "gpu/optimizer.hpp"

namespace shardcheck::gpu {

// The CPU reference's constants (core/kernels/cpu/optimizer.cpp, execute(Adam)), expression for
// expression: each is computed in double and cast to float once.
AdamConstants adam_constants(const core::kernel::Adam& k) {
  const double step = static_cast<double>(k.step);
  return AdamConstants{
      .b1 = static_cast<float>(k.beta1),
      .b2 = static_cast<float>(k.beta2),
      .one_minus_b1 = static_cast<float>(1.0 - k.beta1),
      .one_minus_b2 = static_cast<float>(1.0 - k.beta2),
      .lr = static_cast<float>(k.lr),
      .eps = static_cast<float>(k.eps),
      .weight_decay = static_cast<float>(k.weight_decay),
      .bias_correction1 = static_cast<float>(1.0 - std::pow(k.beta1, step)),
      .bias_correction2 = static_cast<float>(1.0 - std::pow(k.beta2, step)),
  };
}

SgdConstants sgd_constants(const core::kernel::Sgd& k) {
  return SgdConstants{.lr = static_cast<float>(k.lr), .weight_decay = static_cast<float>(k.weight_decay)};
}

namespace {

__global__ void adam_kernel(Operand param, Operand grad, Operand m_t, Operand v_t, const double* coef_ptr,
                            AdamConstants c) {
  const bool has_coef = coef_ptr != nullptr;
  const float coef = has_coef ? static_cast<float>(*coef_ptr) : 1.0f;
  for (int64_t i = dev::thread_index(); i < param.numel; i += dev::grid_stride()) {
    const float gr = dev::loadf(grad, i);
    const float g = has_coef ? __fmul_rn(gr, coef) : gr;
    const float m = __fadd_rn(__fmul_rn(c.b1, dev::loadf(m_t, i)), __fmul_rn(c.one_minus_b1, g));
    const float v =
        __fadd_rn(__fmul_rn(c.b2, dev::loadf(v_t, i)), __fmul_rn(__fmul_rn(c.one_minus_b2, g), g));
    const float mhat = __fdiv_rn(m, c.bias_correction1), vhat = __fdiv_rn(v, c.bias_correction2);
    const float p = dev::loadf(param, i);
    const float update =
        __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), c.eps)), __fmul_rn(c.weight_decay, p));
    dev::storef(param, i, __fsub_rn(p, __fmul_rn(c.lr, update)));
    dev::storef(m_t, i, m);  // mhat used m before this rounding to m's dtype
    dev::storef(v_t, i, v);
  }
}

__global__ void sgd_kernel(Operand param, Operand grad, const double* coef_ptr, SgdConstants c) {
  const bool has_coef = coef_ptr != nullptr;
  const float coef = has_coef ? static_cast<float>(*coef_ptr) : 1.0f;
  for (int64_t i = dev::thread_index(); i < param.numel; i += dev::grid_stride()) {
    const float gr = dev::loadf(grad, i);
    const float g = has_coef ? __fmul_rn(gr, coef) : gr;
    const float p = dev::loadf(param, i);
    dev::storef(param, i, __fsub_rn(p, __fmul_rn(c.lr, __fadd_rn(g, __fmul_rn(c.weight_decay, p)))));
  }
}

}  // namespace

void launch_adam(Operand param, Operand grad, Operand m, Operand v, const double* coef, AdamConstants c,
                 cudaStream_t stream) {
  if (param.numel == 0) return;
  adam_kernel<<<dev::grid_for(param.numel), dev::kBlock, 0, stream>>>(param, grad, m, v, coef, c);
  SC_CUDA_CHECK_LAST();
}

void launch_sgd(Operand param, Operand grad, const double* coef, SgdConstants c, cudaStream_t stream) {
  if (param.numel == 0) return;
  sgd_kernel<<<dev::grid_for(param.numel), dev::kBlock, 0, stream>>>(param, grad, coef, c);
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu
