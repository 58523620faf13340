// GELU through the shared elementwise map: the same constants and evaluation order as
// core/kernels/cpu/gelu.cpp, with CUDA's tanhf in place of libm's.
#include "gpu/device_util.cuh"
#include "gpu/gelu.hpp"

namespace shardcheck::gpu {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kGeluCubic3 = 0.134145f;  // 3 * 0.044715

__device__ __forceinline__ float gelu_tanh(float x) {
  const float cube = (x * x) * x;
  return tanhf(kGeluScale * (x + kGeluCubic * cube));
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

}  // namespace

void launch_gelu_forward(Operand x, Operand y, cudaStream_t stream) {
  dev::launch_map<float>(x, Operand{}, y, GeluForwardOp{}, stream);
}

void launch_gelu_backward(Operand x, Operand dy, Operand dx, cudaStream_t stream) {
  dev::launch_map<float>(x, dy, dx, GeluBackwardOp{}, stream);
}

}  // namespace shardcheck::gpu
