// The GPU backend's kernel dispatcher: runs any core::KernelCall on a CUDA stream with the
// semantics of core::execute_cpu, the reference tests/gpu/kernels_test.cpp compares it with.
//   struct Mem : gpu::DeviceMemory { void* ptr(const core::TensorRef& t) override; };
//   gpu::Blas blas;                                      // per device; keeps per-stream scratch
//   gpu::launch(core::kernels::scale(0, g, g, 0.5), mem, stream, blas);
// launch() only enqueues work and never reads device memory; it waits for a stream only when
// that stream first needs more scratch than its Blas holds (see Blas::scratch).
// Which kernels match the CPU bit for bit, and which within a tolerance, is stated in each
// family's header (elementwise, embedding, layernorm, gelu, softmax, optimizer, reductions,
// blas).
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernels/kernels.hpp"
#include "gpu/blas.hpp"
#include "gpu/check.hpp"

namespace shardcheck::gpu {

// Where tensors live on the device; the GPU runtime implements it.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // The device address of t's first element (t.offset elements of t.dtype into t.buffer).
  virtual void* ptr(const core::TensorRef& t) = 0;
};

// A call that core::check_kernel rejects (wrong operand counts, lengths or dtypes): a bug in
// the program that built it, reported before anything is enqueued.
class KernelCallError : public CudaError {
 public:
  using CudaError::CudaError;
};

// Validates `call` (throws KernelCallError), then enqueues its kernels on `stream`. Operands
// are either the same range (in place) or disjoint. Launch failures throw CudaError.
void launch(const core::KernelCall& call, DeviceMemory& mem, cudaStream_t stream, Blas& blas);

}  // namespace shardcheck::gpu
