// The CPU reference, one file per layer in this folder, each named after its twin in gpu/.
// kernels.cpp's check_kernel and execute_cpu reach these by std::visit on the call's parameters.
// Private to core/kernels/; everything else goes through kernels.hpp.
//
// check() says why a call's arguments do not fit its kernel (counts, lengths, dtypes,
// in-place ranges), or returns empty; every backend calls it through check_kernel.
// execute() is the CPU reference, called only after its check passed.
//
// Numerics, which a GPU port must reproduce: every input is widened to fp32 (bf16 exactly)
// into a scratch vector, arithmetic is fp32 in the loop orders kernels.hpp gives, and each
// output is rounded to its dtype once, when stored; Fill, Copy, Add, Scale and Divide instead
// take any dtype and go element by element in float, or in double when an operand is f64. All
// inputs are read before any output is written, so in-place calls (Adam, Sgd, y == x) see their
// inputs as they were. The build forbids FMA contraction (-ffp-contract=off); nothing in this
// folder calls std::fma. sqrt and the divisions are correctly rounded IEEE operations, so a GPU
// port matches them bit for bit (no rsqrt, no fast division); tanh is core/kernels/tanh_f32.hpp,
// plain fp32 operations that the GPU port calls too; std::exp and std::log come from libm
// (expf, logf), so a GPU port of softmax is compared with a tolerance.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "core/kernels/kernels.hpp"

namespace shardcheck::core::cpu {

// elementwise.cpp (gpu/elementwise.cu)
std::string check(const KernelCall& c, const kernel::Opaque& k);
void execute(const KernelCall& c, const kernel::Opaque& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::Fill& k);
void execute(const KernelCall& c, const kernel::Fill& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::Copy& k);
void execute(const KernelCall& c, const kernel::Copy& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::Add& k);
void execute(const KernelCall& c, const kernel::Add& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::Scale& k);
void execute(const KernelCall& c, const kernel::Scale& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::Divide& k);
void execute(const KernelCall& c, const kernel::Divide& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::RoundBf16& k);
void execute(const KernelCall& c, const kernel::RoundBf16& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::RoundToGrid& k);
void execute(const KernelCall& c, const kernel::RoundToGrid& k, MemoryView& mem);
// RoundToGrid's rounding: nearbyint(u) in the default rounding mode (half to even, the sign
// kept, NaN through), computed without the rounding mode or a libm call.
double round_half_even(double u);
namespace detail {
// Below 2^52, adding then subtracting 2^52 rounds |u| to an integer, the spacing of doubles
// there being 1 (ties to even, the default mode); from 2^52 on, doubles are integers already.
inline double round_half_even(double u) {
  const double a = u < 0 ? -u : u;
  const double r = a < 0x1p52 ? (a + 0x1p52) - 0x1p52 : a;
  return std::copysign(r, u);
}
}  // namespace detail
std::string check(const KernelCall& c, const kernel::BiasAdd& k);
void execute(const KernelCall& c, const kernel::BiasAdd& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::BiasGelu& k);
void execute(const KernelCall& c, const kernel::BiasGelu& k, MemoryView& mem);

// embedding.cpp (gpu/embedding.cu)
std::string check(const KernelCall& c, const kernel::EmbeddingForward& k);
void execute(const KernelCall& c, const kernel::EmbeddingForward& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::EmbeddingBackward& k);
void execute(const KernelCall& c, const kernel::EmbeddingBackward& k, MemoryView& mem);

// layernorm.cpp (gpu/layernorm.cu)
std::string check(const KernelCall& c, const kernel::LayerNormForward& k);
void execute(const KernelCall& c, const kernel::LayerNormForward& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::LayerNormBackward& k);
void execute(const KernelCall& c, const kernel::LayerNormBackward& k, MemoryView& mem);

// blas.cpp (gpu/blas.cu)
std::string check(const KernelCall& c, const kernel::Gemm& k);
void execute(const KernelCall& c, const kernel::Gemm& k, MemoryView& mem);
// The product loop of execute(Gemm) for each instruction set it is built for, so that a test
// can hold them equal bit for bit: out (M x N, holding C when reads_c) = alpha * a (M x K) b
// (K x N) (+ beta * out), all row-major; acc is scratch of length N. `available` says whether
// this processor can run it; execute uses the widest available.
struct GemmPath {
  const char* name;
  bool available;
  void (*run)(const float* a, const float* b, float* out, size_t m, size_t n, size_t k, float alpha,
              float beta, bool reads_c, float* acc);
};
std::vector<GemmPath> gemm_paths();

// gelu.cpp (gpu/gelu.cu)
std::string check(const KernelCall& c, const kernel::GeluForward& k);
void execute(const KernelCall& c, const kernel::GeluForward& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::GeluBackward& k);
void execute(const KernelCall& c, const kernel::GeluBackward& k, MemoryView& mem);

// softmax.cpp (gpu/softmax.cu)
std::string check(const KernelCall& c, const kernel::SoftmaxCrossEntropy& k);
void execute(const KernelCall& c, const kernel::SoftmaxCrossEntropy& k, MemoryView& mem);

// optimizer.cpp (gpu/optimizer.cu)
std::string check(const KernelCall& c, const kernel::Adam& k);
void execute(const KernelCall& c, const kernel::Adam& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::Sgd& k);
void execute(const KernelCall& c, const kernel::Sgd& k, MemoryView& mem);

// reductions.cpp (gpu/reductions.cu)
std::string check(const KernelCall& c, const kernel::BiasGrad& k);
void execute(const KernelCall& c, const kernel::BiasGrad& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::SumSquares& k);
void execute(const KernelCall& c, const kernel::SumSquares& k, MemoryView& mem);
std::string check(const KernelCall& c, const kernel::ClipCoef& k);
void execute(const KernelCall& c, const kernel::ClipCoef& k, MemoryView& mem);

}  // namespace shardcheck::core::cpu
