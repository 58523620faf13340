// The one matrix product (core::kernel::Gemm through cuBLASLt), and the device scratch that
// kernels need for intermediate results (converted Gemm operands, softmax row losses, partial
// sums). cuBLASLt's workspace and the scratch are used in stream order, so a Blas keeps one
// of each per stream it has seen: kernels on different streams never share them.
//   gpu::Blas blas;   // a cuBLASLt handle on the current device; one per device is enough
//   blas.gemm(a, b, c, core::kernel::Gemm{.m = 4, .n = 5, .k = 6}, stream);
// The heuristic's choice is kept per shape, dtypes and operand alignment, as PyTorch does, so
// a training step pays for cuBLASLt's algorithm search once per distinct product.
// Every cuBLASLt call is checked; a failure throws CudaError naming file:line and the status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>

#include "core/kernels/kernels.hpp"
#include "gpu/operand.hpp"

struct cublasLtContext;  // cublasLtHandle_t is a cublasLtContext*; cublasLt.h stays in blas.cu

namespace shardcheck::gpu {

class Blas {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;       // cuBLASLt's, per stream
  static constexpr size_t kInitialScratchBytes = size_t{16} << 20;  // per stream; grows

  // Creates the cuBLASLt handle on the current device; throws CudaError. A stream's
  // workspace and scratch are allocated when a kernel first needs them on that stream.
  explicit Blas(size_t initial_scratch_bytes = kInitialScratchBytes);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // Row-major C (m x n) = alpha * op(A) * op(B) + beta * C, exactly the operands and shapes
  // core::kernel::Gemm describes; C is read only when g.beta != 0. A, B and C are f32 or
  // bf16 in any mix (a mix cuBLASLt lacks is widened to f32 in scratch first). fp32
  // accumulation, no TF32. Asynchronous on `stream`.
  void gemm(const Operand& a, const Operand& b, const Operand& c, const core::kernel::Gemm& g,
            cudaStream_t stream);

  // `stream`'s scratch, at least `bytes` long and 256-byte aligned; its contents belong to
  // the last launch on that stream that asked for it. Growing it (rare: the first time a
  // launch needs more) waits for the stream's pending work, then reallocates.
  void* scratch(size_t bytes, cudaStream_t stream);

 private:
  struct StreamResources {
    cudaStream_t stream = nullptr;
    void* workspace = nullptr;
    void* scratch = nullptr;
    size_t scratch_bytes = 0;
  };
  StreamResources& resources(cudaStream_t stream);
  void release() noexcept;
  bool matmul(const void* a, core::DType ta, const void* b, core::DType tb, void* c, core::DType tc,
              const core::kernel::Gemm& g, cudaStream_t stream);
  struct Plan;
  std::unique_ptr<Plan> make_plan(const void* a, core::DType ta, const void* b, core::DType tb, void* c,
                                  core::DType tc, const core::kernel::Gemm& g);

  struct Plans;  // cuBLASLt descriptors and the heuristic's algorithm, per distinct call (blas.cu)
  cublasLtContext* handle_ = nullptr;
  std::unique_ptr<Plans> plans_;
  size_t initial_scratch_bytes_;
  std::mutex mutex_;                     // rank threads may share a Blas; guards streams_
  std::deque<StreamResources> streams_;  // a deque: references stay valid as it grows
};

}  // namespace shardcheck::gpu
