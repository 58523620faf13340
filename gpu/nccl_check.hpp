// Checked NCCL calls: SC_NCCL_CHECK throws a gpu::CudaError with file:line, the call and
// NCCL's own message.
#pragma once

#include <nccl.h>

#include <string>

#include "gpu/check.hpp"

namespace shardcheck::gpu {

inline void nccl_check(ncclResult_t r, const char* call, const char* file, int line) {
  if (r != ncclSuccess) {
    throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + ncclGetErrorString(r));
  }
}

}  // namespace shardcheck::gpu

#define SC_NCCL_CHECK(call) ::shardcheck::gpu::nccl_check((call), #call, __FILE__, __LINE__)
