// The CPU reference's entry points: one check() and one execute() per kernel type, which
// kernels.cpp's check_kernel and execute_cpu reach by std::visit on the call's parameters.
// Private to core/kernels/; everything else goes through kernels.hpp.
#pragma once

#include <string>

#include "core/kernels/kernels.hpp"

namespace shardcheck::core::cpu {

// Why the call's arguments do not fit the kernel (counts, lengths, dtypes, in-place ranges),
// or empty. execute() may assume its check passed.
std::string check(const KernelCall& c, const kernel::RoundBf16& k);
std::string check(const KernelCall& c, const kernel::RoundToGrid& k);
std::string check(const KernelCall& c, const kernel::EmbeddingForward& k);
std::string check(const KernelCall& c, const kernel::EmbeddingBackward& k);
std::string check(const KernelCall& c, const kernel::LayerNormForward& k);
std::string check(const KernelCall& c, const kernel::LayerNormBackward& k);
std::string check(const KernelCall& c, const kernel::Gemm& k);
std::string check(const KernelCall& c, const kernel::BiasAdd& k);
std::string check(const KernelCall& c, const kernel::BiasGrad& k);
std::string check(const KernelCall& c, const kernel::GeluForward& k);
std::string check(const KernelCall& c, const kernel::GeluBackward& k);
std::string check(const KernelCall& c, const kernel::SoftmaxCrossEntropy& k);
std::string check(const KernelCall& c, const kernel::Adam& k);
std::string check(const KernelCall& c, const kernel::Sgd& k);
std::string check(const KernelCall& c, const kernel::SumSquares& k);
std::string check(const KernelCall& c, const kernel::ClipCoef& k);

// The CPU reference: reads every input, computes, then writes every output.
void execute(const KernelCall& c, const kernel::RoundBf16& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::RoundToGrid& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::EmbeddingForward& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::EmbeddingBackward& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::LayerNormForward& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::LayerNormBackward& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::Gemm& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::BiasAdd& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::BiasGrad& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::GeluForward& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::GeluBackward& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::SoftmaxCrossEntropy& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::Adam& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::Sgd& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::SumSquares& k, MemoryView& mem);
void execute(const KernelCall& c, const kernel::ClipCoef& k, MemoryView& mem);

}  // namespace shardcheck::core::cpu
