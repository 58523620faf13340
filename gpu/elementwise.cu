// Elementwise kernels: grid-stride loops, fp32 arithmetic identical to the CPU reference.
#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"

namespace shardcheck::gpu {

namespace {
__global__ void scale_kernel(const float* in, float* out, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __fmul_rn(in[i], factor);  // no contraction: the CPU reference multiplies alone
  }
}

int grid_for(int64_t n, int block) {
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}
}  // namespace

void launch_scale(const float* in, float* out, int64_t n, float factor, cudaStream_t stream) {
  scale_kernel<<<grid_for(n, 256), 256, 0, stream>>>(in, out, n, factor);
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu
