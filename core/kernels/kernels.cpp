// Kernel builders, and the dispatch of a call to its kernel's argument check and CPU
// reference: one check() and one execute() per kernel type in core/kernels/cpu/, chosen by
// std::visit on the parameters, so a kernel type without both does not build.
#include <type_traits>

#include "core/base/status.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/kernels.hpp"

namespace shardcheck::core {

namespace {

KernelCall make(std::string name, StreamId s, std::vector<TensorRef> reads, std::vector<TensorRef> writes,
                KernelParams p) {
  return KernelCall{std::move(name), s, std::move(reads), std::move(writes), p};
}

}  // namespace

bool is_elementwise(const KernelParams& p) {
  if (const auto* o = std::get_if<kernel::Opaque>(&p)) return o->elementwise;
  return std::visit([](const auto& k) { return std::decay_t<decltype(k)>::kElementwise; }, p);
}

namespace kernels {
KernelCall opaque(std::string name, StreamId s, std::vector<TensorRef> reads, std::vector<TensorRef> writes) {
  return make(std::move(name), s, std::move(reads), std::move(writes), kernel::Opaque{});
}
KernelCall opaque_elementwise(std::string name, StreamId s, std::vector<TensorRef> reads,
                              std::vector<TensorRef> writes) {
  return make(std::move(name), s, std::move(reads), std::move(writes), kernel::Opaque{.elementwise = true});
}
KernelCall fill(StreamId s, TensorRef out, double value, std::string name) {
  return make(std::move(name), s, {}, {out}, kernel::Fill{value});
}
KernelCall copy(StreamId s, TensorRef in, TensorRef out, std::string name) {
  return make(std::move(name), s, {in}, {out}, kernel::Copy{});
}
KernelCall add(StreamId s, TensorRef a, TensorRef b, TensorRef out, std::string name) {
  return make(std::move(name), s, {a, b}, {out}, kernel::Add{});
}
KernelCall scale(StreamId s, TensorRef in, TensorRef out, double factor, std::string name) {
  return make(std::move(name), s, {in}, {out}, kernel::Scale{factor});
}
KernelCall divide(StreamId s, TensorRef in, TensorRef out, double divisor, std::string name) {
  return make(std::move(name), s, {in}, {out}, kernel::Divide{divisor});
}
KernelCall round_bf16(StreamId s, TensorRef in, TensorRef out, std::string name) {
  return make(std::move(name), s, {in}, {out}, kernel::RoundBf16{});
}
KernelCall round_to_grid(StreamId s, TensorRef in, TensorRef out, double q, double limit, std::string name) {
  return make(std::move(name), s, {in}, {out}, kernel::RoundToGrid{q, limit});
}
KernelCall embedding_forward(StreamId s, TensorRef tokens, TensorRef weight, TensorRef out, int64_t vocab,
                             int64_t hidden) {
  return make("embedding_forward", s, {tokens, weight}, {out}, kernel::EmbeddingForward{vocab, hidden});
}
KernelCall embedding_backward(StreamId s, TensorRef tokens, TensorRef dout, TensorRef dweight, int64_t vocab,
                              int64_t hidden, bool round_bf16) {
  return make("embedding_backward", s, {tokens, dout}, {dweight},
              kernel::EmbeddingBackward{vocab, hidden, round_bf16});
}
KernelCall layernorm_forward(StreamId s, TensorRef x, TensorRef gamma, TensorRef beta, TensorRef y,
                             TensorRef mean, TensorRef rstd, int64_t rows, int64_t hidden, double eps) {
  return make("layernorm_forward", s, {x, gamma, beta}, {y, mean, rstd},
              kernel::LayerNormForward{rows, hidden, eps});
}
KernelCall layernorm_backward(StreamId s, TensorRef dy, TensorRef x, TensorRef gamma, TensorRef mean,
                              TensorRef rstd, TensorRef dx, TensorRef dgamma, TensorRef dbeta, int64_t rows,
                              int64_t hidden, bool round_bf16) {
  return make("layernorm_backward", s, {dy, x, gamma, mean, rstd}, {dx, dgamma, dbeta},
              kernel::LayerNormBackward{rows, hidden, round_bf16});
}
// C is an input only when beta != 0: with beta == 0 its old contents never matter.
KernelCall gemm(StreamId s, TensorRef a, TensorRef b, TensorRef c, kernel::Gemm shape, std::string name) {
  std::vector<TensorRef> reads{a, b};
  if (shape.beta != 0.0) reads.push_back(c);
  return make(std::move(name), s, std::move(reads), {c}, shape);
}
KernelCall bias_add(StreamId s, TensorRef x, TensorRef bias, TensorRef y, int64_t rows, int64_t cols) {
  return make("bias_add", s, {x, bias}, {y}, kernel::BiasAdd{rows, cols});
}
KernelCall bias_gelu(StreamId s, TensorRef x, TensorRef bias, TensorRef pre, TensorRef y, int64_t rows,
                     int64_t cols) {
  return make("bias_gelu", s, {x, bias}, {pre, y}, kernel::BiasGelu{rows, cols});
}
KernelCall bias_grad(StreamId s, TensorRef dy, TensorRef dbias, int64_t rows, int64_t cols, bool round_bf16) {
  return make("bias_grad", s, {dy}, {dbias}, kernel::BiasGrad{rows, cols, round_bf16});
}
KernelCall gelu_forward(StreamId s, TensorRef x, TensorRef y) {
  return make("gelu_forward", s, {x}, {y}, kernel::GeluForward{});
}
KernelCall gelu_backward(StreamId s, TensorRef x, TensorRef dy, TensorRef dx) {
  return make("gelu_backward", s, {x, dy}, {dx}, kernel::GeluBackward{});
}
KernelCall softmax_cross_entropy(StreamId s, TensorRef logits, TensorRef targets, TensorRef dlogits,
                                 TensorRef loss, int64_t rows, int64_t vocab, double grad_scale) {
  return make("softmax_cross_entropy", s, {logits, targets}, {dlogits, loss},
              kernel::SoftmaxCrossEntropy{rows, vocab, grad_scale});
}
// Passing a coefficient sets has_coef; has_coef without one is refused by check_kernel.
KernelCall adam(StreamId s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                std::optional<TensorRef> coef, kernel::Adam hyper, std::string name) {
  std::vector<TensorRef> reads{param, grad, m, v};
  if (coef) reads.push_back(*coef);
  hyper.has_coef = hyper.has_coef || coef.has_value();
  return make(std::move(name), s, std::move(reads), {param, m, v}, hyper);
}
KernelCall sgd(StreamId s, TensorRef param, TensorRef grad, std::optional<TensorRef> coef, kernel::Sgd hyper,
               std::string name) {
  std::vector<TensorRef> reads{param, grad};
  if (coef) reads.push_back(*coef);
  hyper.has_coef = hyper.has_coef || coef.has_value();
  return make(std::move(name), s, std::move(reads), {param}, hyper);
}
KernelCall sum_squares(StreamId s, TensorRef x, TensorRef acc, bool accumulate, std::string name) {
  std::vector<TensorRef> reads{x};
  if (accumulate) reads.push_back(acc);
  return make(std::move(name), s, std::move(reads), {acc}, kernel::SumSquares{accumulate});
}
KernelCall clip_coef(StreamId s, TensorRef sumsq, TensorRef coef, TensorRef norm, double max_norm) {
  return make("clip_coef", s, {sumsq}, {coef, norm}, kernel::ClipCoef{max_norm});
}
}  // namespace kernels

Status check_kernel(const KernelCall& c) {
  std::string why = std::visit([&](const auto& k) { return cpu::check(c, k); }, c.params);
  if (why.empty()) return {};
  return fail(std::move(why));
}

void execute_cpu(const KernelCall& c, MemoryView& mem) {
  if (Status e = check_kernel(c); !e) throw InternalError(e.message());
  std::visit([&](const auto& k) { cpu::execute(c, k, mem); }, c.params);
}

}  // namespace shardcheck::core
