// Runs one core::KernelCall on both backends from the same starting bytes and compares them:
// gpu::launch on the device, core::execute_cpu on host copies. Every tensor lives in its own
// buffer, `pad` elements in (so device addresses are misaligned by default, as a TensorRef
// into a larger buffer may be), with guard bytes around it; outputs are poisoned with 0xFF
// bytes on the device before the launch, so an element the GPU never writes fails.
//   KernelTwin twin;
//   TensorRef x = twin.random(DType::f32, 1000, rng);
//   twin.require_bitwise(twin.run(core::kernels::scale(0, x, x, 0.5)));
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/base/rng.hpp"
#include "core/kernels/kernels.hpp"
#include "gpu/kernels.hpp"

namespace shardcheck::gpu_test {

using core::DType;
using core::TensorRef;

// Tolerances, as ||gpu - cpu|| / ||cpu|| over an output tensor, for kernels whose GPU
// arithmetic is not the CPU's sequence of IEEE operations.
constexpr double kTolF32 = 1e-5;   // fp32 math in another summation order, or CUDA's expf/tanhf
constexpr double kTolBf16 = 1e-2;  // a bf16 output: a tiny fp32 difference can flip a rounding
constexpr double kTolF64 = 1e-12;  // f64 sums in a tree order instead of left to right

// The bytes of every buffer, as one backend left them.
using Snapshot = std::vector<std::vector<std::byte>>;

class KernelTwin final : public core::MemoryView, public gpu::DeviceMemory {
 public:
  explicit KernelTwin(int64_t pad_elements = 3,
                      size_t initial_scratch_bytes = gpu::Blas::kInitialScratchBytes);
  ~KernelTwin() override;
  KernelTwin(const KernelTwin&) = delete;
  KernelTwin& operator=(const KernelTwin&) = delete;

  // A tensor of n zero elements.
  TensorRef alloc(DType dt, int64_t n);
  // A tensor holding `values`, rounded to dt.
  TensorRef put(DType dt, const std::vector<double>& values);
  // n values of scale * (approximately normal), each nonzero after rounding to dt.
  TensorRef random(DType dt, int64_t n, core::Rng& rng, double scale = 1.0);
  // n ids uniform in [0, bound).
  TensorRef ids(int64_t n, int64_t bound, core::Rng& rng);
  std::vector<double> get(const TensorRef& t);  // the host copy, widened to double

  // Uploads the host bytes, poisons the outputs that are not also inputs, launches, and
  // returns the device's bytes; then runs the CPU reference on the host bytes.
  Snapshot run(const core::KernelCall& call);
  // Uploads and launches only: the device's bytes (determinism checks; no CPU run).
  Snapshot run_gpu(const core::KernelCall& call);
  // gpu::launch alone, with no check first (for calls that must be refused).
  void launch_unchecked(const core::KernelCall& call) { gpu::launch(call, *this, stream_, blas_); }

  // The GPU's bytes equal the CPU's everywhere (outputs, inputs and guards).
  void require_bitwise(const Snapshot& gpu);
  // Each of `outputs` within `tol` of the CPU (NaNs in the same places), and every other
  // byte (inputs, guards) equal.
  void require_close(const Snapshot& gpu, const std::vector<TensorRef>& outputs, double tol);

  // core::MemoryView: host bytes; gpu::DeviceMemory: device addresses.
  std::byte* data(const TensorRef& t) override;
  void* ptr(const TensorRef& t) override;

 private:
  struct Buffer {
    std::vector<std::byte> host;
    void* device = nullptr;
    DType dtype = DType::f32;
  };
  void launch_on_device(const core::KernelCall& call);
  Snapshot download() const;

  int64_t pad_;
  std::vector<Buffer> buffers_;
  // The last call run, named in every require_* failure: an INFO in run() itself would be
  // gone by the time the caller asserts.
  std::string last_kernel_;
  gpu::Blas blas_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace shardcheck::gpu_test
