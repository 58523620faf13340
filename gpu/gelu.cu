// GELU through the shared elementwise map: the same constants and evaluation order as
// core/kernels/cpu/gelu.cpp, and the same tanh (core/kernels/tanh_f32.hpp): with -fmad=false,
// the results equal the CPU's bit for bit.
#include "core/kernels/tanh_f32.hpp"
#include "gpu/device_util.cuh"
#include "gpu/gelu.hpp"

namespace shardcheck::gpu {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kGeluCubic3 = 0.134145f;  // 3 * 0.044715

__device__ __forceinline__ float gelu_tanh(float x) {
  const float cube = (x * x) * x;
  return core::tanh_f32(kGeluScale * (x + kGeluCubic * cube));
}

struct GeluForwardOp {
  __device__ float operator()(float x, float) const { return (0.5f * x) * (1.0f + gelu_tanh(x)); }
};

struct GeluBackwardOp {
  __device__ float operator()(float x, float dy) const {
    const float t = gelu_tanh(x);
    const float sech2 = 1.0f - t * t;
    const float local =
        0.5f * (1.0f + t) + (((0.5f * x) * sech2) * kGeluScale) * (1.0f + kGeluCubic3 * (x * x));
    return dy * local;
  }
};

// One thread per element, as bias_add_kernel then the map of GeluForwardOp: the sum in the
// same expression, stored to pre (rounded to its dtype), read back as stored, and GELU of that.
__global__ void bias_gelu_kernel(Operand x, Operand bias, Operand pre, Operand y, int64_t cols) {
  for (int64_t i = dev::thread_index(); i < y.numel; i += dev::grid_stride()) {
    dev::storef(pre, i, dev::loadf(x, i) + dev::loadf(bias, i % cols));
    dev::storef(y, i, GeluForwardOp{}(dev::loadf(pre, i), 0.0f));
  }
}

}  // namespace

void launch_bias_gelu(Operand x, Operand bias, Operand pre, Operand y, int64_t rows, int64_t cols,
                      cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  bias_gelu_kernel<<<dev::grid_for(y.numel), dev::kBlock, 0, stream>>>(x, bias, pre, y, cols);
  SC_CUDA_CHECK_LAST();
}

void launch_gelu_forward(Operand x, Operand y, cudaStream_t stream) {
  dev::launch_map<float>(x, Operand{}, y, GeluForwardOp{}, stream);
}

void launch_gelu_backward(Operand x, Operand dy, Operand dx, cudaStream_t stream) {
  dev::launch_map<float>(x, dy, dx, GeluBackwardOp{}, stream);
}

}  // namespace shardcheck::gpu
