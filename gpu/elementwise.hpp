// Elementwise device kernels with host launchers. Each has a CPU twin in core/kernels.cpp
// and a test comparing the two bit for bit.
//   gpu::launch_scale(d_in, d_out, n, 0.5f, stream);   // out[i] = in[i] * 0.5f
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardcheck::gpu {

// out[i] = in[i] * factor, in fp32 (in may equal out).
void launch_scale(const float* in, float* out, int64_t n, float factor, cudaStream_t stream);

}  // namespace shardcheck::gpu
