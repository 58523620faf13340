// CUDA error reporting and device discovery.
#include "gpu/check.hpp"

namespace shardcheck::gpu {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call +
                  " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace shardcheck::gpu
