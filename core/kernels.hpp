// Kernel calls: what a kernel computes (its parameters), which element ranges it reads and
// writes, and on which stream. Every backend executes the same closed set of kernels: the
// simulator with the CPU reference in kernels_cpu.cpp, the GPU backend with CUDA kernels
// tested against that reference. Builders keep call sites short:
//   rt.launch(kernels::scale(stream, grad, grad, 0.25));   // grad *= 0.25
// Kernels marked elementwise propagate uninitialized bytes position by position (like
// MemorySanitizer's shadow propagation); every other kernel consumes its inputs, and reading
// never-written bytes there is an `uninitialized_read`.
#pragma once

#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor_ref.hpp"

namespace shardcheck::core {

namespace kernel {
// A trace program's kernel: no computation; its writes get a pattern derived from the call.
struct Opaque {
  static constexpr bool kElementwise = false;
};
// writes[0][i] = value
struct Fill {
  static constexpr bool kElementwise = true;
  double value = 0.0;
};
// writes[0][i] = convert(reads[0][i]): a copy, or a cast when dtypes differ (bf16 rounds to
// nearest even).
struct Copy {
  static constexpr bool kElementwise = true;
};
// writes[0][i] = reads[0][i] + reads[1][i]
struct Add {
  static constexpr bool kElementwise = true;
};
// writes[0][i] = reads[0][i] * factor
struct Scale {
  static constexpr bool kElementwise = true;
  double factor = 1.0;
};
// writes[0][i] = reads[0][i] / divisor (a true division, exact where the quotient is)
struct Divide {
  static constexpr bool kElementwise = true;
  double divisor = 1.0;
};
}  // namespace kernel

using KernelParams = std::variant<kernel::Opaque, kernel::Fill, kernel::Copy, kernel::Add,
                                  kernel::Scale, kernel::Divide>;

bool is_elementwise(const KernelParams& p);

struct KernelCall {
  std::string name;  // shown in traces and findings
  StreamId stream = -1;
  std::vector<TensorRef> reads;
  std::vector<TensorRef> writes;
  KernelParams params;
};

namespace kernels {
KernelCall opaque(std::string name, StreamId s, std::vector<TensorRef> reads, std::vector<TensorRef> writes);
KernelCall fill(StreamId s, TensorRef out, double value, std::string name = "fill");
KernelCall copy(StreamId s, TensorRef in, TensorRef out, std::string name = "copy");
KernelCall add(StreamId s, TensorRef a, TensorRef b, TensorRef out, std::string name = "add");
KernelCall scale(StreamId s, TensorRef in, TensorRef out, double factor, std::string name = "scale");
KernelCall divide(StreamId s, TensorRef in, TensorRef out, double divisor, std::string name = "divide");
}  // namespace kernels

// Resolves a TensorRef to host-addressable bytes (the simulator's device memory, or a test's
// vectors). Returns a pointer to the first element of the range.
class MemoryView {
 public:
  virtual ~MemoryView() = default;
  virtual std::byte* data(const TensorRef& ref) = 0;
};

// Runs a kernel on the CPU. Throws InternalError when its arguments are inconsistent.
void execute_cpu(const KernelCall& call, MemoryView& memory);
// Checks argument counts, sizes and dtypes; empty when fine, else why not.
std::string check_kernel(const KernelCall& call);

// Element access in a buffer of any float dtype, computing in double.
double load_element(const std::byte* base, DType t, int64_t i);
void store_element(std::byte* base, DType t, int64_t i, double v);

}  // namespace shardcheck::core
