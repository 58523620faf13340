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
// port matches them bit for bit (no rsqrt, no fast division); std::tanh, std::exp and std::log
// come from libm (tanhf, expf, logf), so a GPU port of GELU and softmax is compared with a
// tolerance.
#pragma once

#include <string>

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
