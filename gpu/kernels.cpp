// gpu::launch: checks a KernelCall with core::check_kernel, resolves its TensorRefs to device
// operands, and hands it to the family launcher for its kernel type. The std::visit below
// names every alternative of core::KernelParams (no catch-all), so adding a kernel type to
// core breaks this build until the GPU backend implements it.
#include "gpu/kernels.hpp"

#include <string>
#include <variant>

#include "core/base/overloaded.hpp"
#include "core/base/rng.hpp"
#include "gpu/elementwise.hpp"
#include "gpu/embedding.hpp"
#include "gpu/gelu.hpp"
#include "gpu/layernorm.hpp"
#include "gpu/optimizer.hpp"
#include "gpu/reductions.hpp"
#include "gpu/softmax.hpp"

namespace shardcheck::gpu {

namespace {

namespace kernel = core::kernel;

// Empty ranges are never resolved: the runtime need not have an address for them.
Operand operand(DeviceMemory& mem, const core::TensorRef& t) {
  return Operand{t.numel > 0 ? mem.ptr(t) : nullptr, t.numel, t.dtype};
}

double* scalar_f64(DeviceMemory& mem, const core::TensorRef& t) { return static_cast<double*>(mem.ptr(t)); }

}  // namespace

void launch(const core::KernelCall& call, DeviceMemory& mem, cudaStream_t stream, Blas& blas) {
  if (auto why = core::check_kernel(call); !why) throw KernelCallError("gpu::launch: " + why.message());
  const auto in = [&](size_t i) { return operand(mem, call.reads[i]); };
  const auto out = [&](size_t i) { return operand(mem, call.writes[i]); };
  const auto s = stream;
  std::visit(core::Overloaded{
                 [&](const kernel::Opaque&) {
                   // The CPU's pattern (core::kernel::Opaque), derived from the call's name.
                   const auto h = static_cast<uint32_t>(core::fnv1a(call.name));
                   for (const core::TensorRef& w : call.writes) {
                     if (w.bytes() > 0) launch_opaque_pattern(mem.ptr(w), w.bytes(), h, s);
                   }
                 },
                 [&](const kernel::Fill& k) { launch_fill(out(0), k.value, s); },
                 [&](const kernel::Copy&) { launch_copy(in(0), out(0), s); },
                 [&](const kernel::Add&) { launch_add(in(0), in(1), out(0), s); },
                 [&](const kernel::Scale& k) { launch_scale(in(0), out(0), k.factor, s); },
                 [&](const kernel::Divide& k) { launch_divide(in(0), out(0), k.divisor, s); },
                 [&](const kernel::RoundBf16&) { launch_round_bf16(in(0), out(0), s); },
                 [&](const kernel::RoundToGrid& k) { launch_round_to_grid(in(0), out(0), k.q, k.limit, s); },
                 [&](const kernel::EmbeddingForward& k) {
                   launch_embedding_forward(in(0), in(1), out(0), k.vocab, k.hidden, s);
                 },
                 [&](const kernel::EmbeddingBackward& k) {
                   launch_embedding_backward(in(0), in(1), out(0), k.vocab, k.hidden, k.round_bf16, s);
                 },
                 [&](const kernel::LayerNormForward& k) {
                   launch_layernorm_forward(in(0), in(1), in(2), out(0), out(1), out(2), k.rows, k.hidden,
                                            static_cast<float>(k.eps), s);
                 },
                 [&](const kernel::LayerNormBackward& k) {
                   void* scratch = blas.scratch(layernorm_backward_scratch_bytes(k.rows, k.hidden), s);
                   launch_layernorm_backward(in(0), in(1), in(2), in(3), in(4), out(0), out(1), out(2),
                                             k.rows, k.hidden, k.round_bf16, scratch, s);
                 },
                 [&](const kernel::Gemm& k) { blas.gemm(in(0), in(1), out(0), k, s); },
                 [&](const kernel::BiasAdd& k) { launch_bias_add(in(0), in(1), out(0), k.rows, k.cols, s); },
                 [&](const kernel::BiasGelu& k) {
                   launch_bias_gelu(in(0), in(1), out(0), out(1), k.rows, k.cols, s);
                 },
                 [&](const kernel::BiasGrad& k) {
                   launch_bias_grad(in(0), out(0), k.rows, k.cols, k.round_bf16,
                                    blas.scratch(bias_grad_scratch_bytes(k.rows, k.cols), s), s);
                 },
                 [&](const kernel::GeluForward&) { launch_gelu_forward(in(0), out(0), s); },
                 [&](const kernel::GeluBackward&) { launch_gelu_backward(in(0), in(1), out(0), s); },
                 [&](const kernel::SoftmaxCrossEntropy& k) {
                   float* row_loss =
                       static_cast<float*>(blas.scratch(sizeof(float) * static_cast<size_t>(k.rows), s));
                   launch_softmax_cross_entropy(in(0), in(1), out(0), out(1), k.rows, k.vocab,
                                                static_cast<float>(k.grad_scale), row_loss, s);
                 },
                 [&](const kernel::Adam& k) {
                   const double* coef = k.has_coef ? scalar_f64(mem, call.reads[4]) : nullptr;
                   launch_adam(in(0), in(1), in(2), in(3), coef, adam_constants(k), s);
                 },
                 [&](const kernel::Sgd& k) {
                   const double* coef = k.has_coef ? scalar_f64(mem, call.reads[2]) : nullptr;
                   launch_sgd(in(0), in(1), coef, sgd_constants(k), s);
                 },
                 [&](const kernel::SumSquares& k) {
                   double* partials =
                       static_cast<double*>(blas.scratch(sizeof(double) * kSumSquaresPartials, s));
                   const double* acc_in = k.accumulate ? scalar_f64(mem, call.reads[1]) : nullptr;
                   launch_sum_squares(in(0), acc_in, scalar_f64(mem, call.writes[0]), partials, s);
                 },
                 [&](const kernel::ClipCoef& k) {
                   launch_clip_coef(scalar_f64(mem, call.reads[0]), scalar_f64(mem, call.writes[0]),
                                    scalar_f64(mem, call.writes[1]), k.max_norm, s);
                 },
             },
             call.params);
}

}  // namespace shardcheck::gpu
