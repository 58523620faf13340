// Checked CUDA calls: every CUDA runtime call goes through SC_CUDA_CHECK, which throws a
// gpu::CudaError naming the file, the line, the call and CUDA's own message (as llm.c does).
//   SC_CUDA_CHECK(cudaMalloc(&p, bytes));
//   my_kernel<<<grid, block, 0, stream>>>(...); SC_CUDA_CHECK_LAST();
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace shardcheck::gpu {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The program run, not the backend, is at fault: its ranks' collectives or transfers do not
// match, or they wait for each other. The run stops; the simulator shows why.
class ProgramFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

inline void cuda_check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) throw_cuda_error(err, call, file, line);
}

// Number of CUDA devices usable here; 0 when there is no driver or no device, never throws.
int device_count();

}  // namespace shardcheck::gpu

#define SC_CUDA_CHECK(call) ::shardcheck::gpu::cuda_check((call), #call, __FILE__, __LINE__)
#define SC_CUDA_CHECK_LAST() \
  ::shardcheck::gpu::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
