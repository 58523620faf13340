// A kernel operand as the launchers see it: a device address, a length and a dtype. The
// dispatcher (kernels.cpp) builds one per TensorRef; every launcher takes them by value.
//   gpu::Operand x{d_ptr, 1024, core::DType::bf16};
// Operands of one call are either the very same range (an in-place call) or disjoint.
#pragma once

#include <cstdint>

#include "core/base/dtype.hpp"

namespace shardcheck::gpu {

struct Operand {
  void* ptr = nullptr;  // device address of element 0; may be null when numel == 0
  int64_t numel = 0;
  core::DType dtype = core::DType::f32;
};

}  // namespace shardcheck::gpu
