// GELU (tanh form), forward and backward (core::kernel::GeluForward / GeluBackward). The
// arithmetic follows the CPU reference operation for operation, with the same tanh
// (core/kernels/tanh_f32.hpp, not CUDA's tanhf), so tests compare these with the CPU bit for bit.
//   gpu::launch_gelu_backward(x, dy, dx, stream);   // dx may be dy
#pragma once

#include <cuda_runtime_api.h>

#include "gpu/operand.hpp"

namespace shardcheck::gpu {

// y = (0.5f*x)*(1 + t), t = tanh(s*(x + 0.044715f*((x*x)*x))), s = sqrt(2/pi) as a float.
void launch_gelu_forward(Operand x, Operand y, cudaStream_t stream);
// dx = dy * (0.5f*(1 + t) + (((0.5f*x)*(1 - t*t))*s)*(1 + 0.134145f*(x*x))).
void launch_gelu_backward(Operand x, Operand dy, Operand dx, cudaStream_t stream);
// pre = x + bias[col] (rows x cols, row-major; pre may be x), then y = gelu of pre as stored:
// launch_bias_add then launch_gelu_forward in one pass, with their bits. y must not overlap x
// or pre.
void launch_bias_gelu(Operand x, Operand bias, Operand pre, Operand y, int64_t rows, int64_t cols,
                      cudaStream_t stream);

}  // namespace shardcheck::gpu
