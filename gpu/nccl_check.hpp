// Checked NCCL calls: SC_NCCL_CHECK throws a gpu::CudaError with file:line, the call and
// NCCL's own message; and NCCL's name for each of our dtypes.
#pragma once

#include <nccl.h>

#include <string>

#include "core/base/dtype.hpp"
#include "gpu/check.hpp"

namespace shardcheck::gpu {

inline void nccl_check(ncclResult_t r, const char* call, const char* file, int line) {
  if (r != ncclSuccess) {
    throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call +
                    " failed: " + ncclGetErrorString(r));
  }
}

inline ncclDataType_t nccl_type(core::DType t) {
  switch (t) {
    case core::DType::f32:
      return ncclFloat32;
    case core::DType::bf16:
      return ncclBfloat16;
    case core::DType::f64:
      return ncclFloat64;
    case core::DType::i32:
      return ncclInt32;
    case core::DType::i64:
      return ncclInt64;
    case core::DType::u8:
    case core::DType::boolean:
      return ncclUint8;
    case core::DType::f16:
      return ncclFloat16;
    case core::DType::i8:
      return ncclInt8;
    case core::DType::i16:  // NCCL has no 16-bit integer; captured programs never run here
      return ncclUint8;
  }
  return ncclUint8;
}

}  // namespace shardcheck::gpu

#define SC_NCCL_CHECK(call) ::shardcheck::gpu::nccl_check((call), #call, __FILE__, __LINE__)
