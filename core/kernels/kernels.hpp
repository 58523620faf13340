// Kernel calls: what a kernel computes (its parameters), which element ranges it reads and
// writes, and on which stream. Every backend executes the same closed set of kernels: the
// simulator with the CPU reference in cpu/ (a file per layer, as in gpu/), the GPU backend with
// CUDA kernels tested against that reference. Builders keep call sites short:
//   rt.launch(kernels::scale(stream, grad, grad, 0.25));   // grad *= 0.25
// Kernels marked elementwise propagate uninitialized bytes position by position (like
// MemorySanitizer's shadow propagation); every other kernel consumes its inputs, and reading
// never-written bytes there is an `uninitialized_read`.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/base/cancel.hpp"
#include "core/base/status.hpp"
#include "core/base/tensor_ref.hpp"

namespace shardcheck::core {

namespace kernel {
// A trace program's kernel: no computation; its writes get a pattern derived from the
// kernel's name: byte i is byte (i % 4) (little-endian) of the 32-bit word
// 0x3f800000 | ((h + (i / 4) * 0x9e3779b9) & 0x7fffff), h = the low 32 bits of
// fnv1a(name) (core/base/rng.hpp): floats in [1, 2), so sums of patterns stay finite.
struct Opaque {
  static constexpr bool kElementwise = false;
  // A captured operator known to be elementwise (aten::add_, aten::div_, ...) over reads and
  // writes of one size: element i of a write depends on element i of the reads alone, so
  // never-written input elements carry to its outputs rather than being consumed
  // (is_elementwise reads this; it changes nothing the kernel computes).
  bool elementwise = false;
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
// writes[0][i] = round_bf16(reads[0][i]): values rounded to bf16 precision, kept in the
// output dtype (how a bf16 gradient looks once accumulated in fp32). f32 or bf16 operands.
struct RoundBf16 {
  static constexpr bool kElementwise = true;
};
// writes[0][i] = q * rint(clamp(reads[0][i] / q, -limit, limit)), computed in double: the
// exact-mode grid rounding of one gradient contribution (docs/semantics.md §3). Precisely
// (float)(q * nearbyint(clamp((double)x / q, -limit, limit))): ties to even; NaN stays NaN,
// infinities clamp. f32 or bf16 operands; needs q > 0 and limit >= 0.
struct RoundToGrid {
  static constexpr bool kElementwise = true;
  double q = 1.0;
  double limit = 0.0;  // in units of q
};

// ---- TinyLM kernels. Shapes are row-major; N rows (tokens), H hidden, V vocab.
// Arithmetic is fp32 (bf16 operands are widened first) with every loop in a fixed order.
// Float tensors are f32 or bf16 unless stated; double parameters (eps, alpha, lr, ...) are
// cast to float once; every sum is one float accumulator starting at +0.0f; each output is
// rounded to its dtype once, when stored, and outputs are overwritten, never added to. The
// CPU reference reads every input before writing any output, so in-place calls are fine.
// sqrt and divisions are IEEE (no rsqrt); tanh is core/kernels/tanh_f32.hpp on both backends;
// exp and log come from libm, so a GPU port is compared with a tolerance on softmax; elsewhere,
// keeping these loop orders, bit for bit.

// reads [tokens i32 N, weight V x H]; writes [out N x H]: out[n] = weight[tokens[n]].
// A token outside [0, V) is a program bug: execute_cpu throws InternalError.
struct EmbeddingForward {
  static constexpr bool kElementwise = false;
  int64_t vocab = 0, hidden = 0;
};
// reads [tokens i32 N, dout N x H]; writes [dweight V x H]: dweight[v] = the sum of dout[n]
// over the n with tokens[n] == v, in the chunked order of summation_order.hpp (64-token
// chunks in token order, then the chunk sums in order), accumulated in fp32 and rounded to
// the output dtype once at the end. Deterministic: no atomics, one fixed order.
// round_bf16: each sum is rounded to bf16 precision before it is stored (kept in dweight's
// dtype), as a RoundBf16 of dweight right after would: mixed precision's gradient rounding,
// fused into the kernel that makes the gradient.
struct EmbeddingBackward {
  static constexpr bool kElementwise = false;
  int64_t vocab = 0, hidden = 0;
  bool round_bf16 = false;
};
// reads [x N x H, gamma H, beta H]; writes [y N x H, mean N, rstd N].
// mean = sum(x)/H; var = sum((x-mean)^2)/H; rstd = 1/sqrt(var+eps);
// y = ((x-mean)*rstd)*gamma + beta. Sums over h in order; y uses mean and rstd before they
// are rounded to their dtype.
struct LayerNormForward {
  static constexpr bool kElementwise = false;
  int64_t rows = 0, hidden = 0;
  double eps = 1e-5;
};
// reads [dy N x H, x N x H, gamma H, mean N, rstd N]; writes [dx N x H, dgamma H, dbeta H].
// xhat = (x-mean)*rstd; g = dy*gamma; dx = rstd*(g - mean(g) - xhat*mean(g*xhat));
// dgamma = sum_n dy*xhat; dbeta = sum_n dy (over n in the chunked order of
// summation_order.hpp: 64-row chunks in row order, then the chunk sums in order). mean(.) = sum over h in
// order / H; dx = rstd * ((g - mean(g)) - xhat*mean(g*xhat)).
// round_bf16: dgamma and dbeta (not dx) are rounded to bf16 precision before they are stored,
// as EmbeddingBackward's round_bf16.
struct LayerNormBackward {
  static constexpr bool kElementwise = false;
  int64_t rows = 0, hidden = 0;
  bool round_bf16 = false;
};
// The one matrix product. reads [A, B] (and C when beta != 0); writes [C].
// C (M x N) = alpha * op(A) * op(B) + beta * C, op(A) M x K (A stored K x M when trans_a),
// op(B) K x N (B stored N x K when trans_b). Each element accumulates k = 0..K-1 in fp32,
// from +0.0f, then C = alpha*acc (+ beta*C, in that order) with alpha, beta cast to float.
// The builder puts C in reads exactly when beta != 0; check_kernel requires reads[2] == C.
struct Gemm {
  static constexpr bool kElementwise = false;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  double alpha = 1.0, beta = 0.0;
};
// reads [x N x C, bias C]; writes [y N x C]: y = x + bias (broadcast over rows).
struct BiasAdd {
  static constexpr bool kElementwise = false;
  int64_t rows = 0, cols = 0;
};
// reads [x N x C, bias C]; writes [pre N x C, y N x C]: pre = x + bias (broadcast over rows),
// rounded to pre's dtype when stored; y = GeluForward of that stored value. The two kernels
// BiasAdd then GeluForward, fused (one pass over the activation, as PyTorch's compiled MLP
// does), with the same bits. pre may be x (in place); y must not overlap x or pre.
struct BiasGelu {
  static constexpr bool kElementwise = false;
  int64_t rows = 0, cols = 0;
};
// reads [dy N x C]; writes [dbias C]: dbias[c] = sum over n of dy[n][c], in the chunked
// order of summation_order.hpp. round_bf16: as EmbeddingBackward's.
struct BiasGrad {
  static constexpr bool kElementwise = false;
  int64_t rows = 0, cols = 0;
  bool round_bf16 = false;
};
// reads [x]; writes [y]: y = 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))), evaluated
// as t = tanh(s*(x + 0.044715f*((x*x)*x))), y = (0.5f*x)*(1 + t), s = sqrt(2/pi) as a float.
struct GeluForward {
  static constexpr bool kElementwise = true;
};
// reads [x, dy]; writes [dx]: dx = dy * d/dx gelu(x) for the tanh form above, evaluated as
// dy * (0.5f*(1 + t) + (((0.5f*x)*(1 - t*t))*s)*(1 + 0.134145f*(x*x))).
struct GeluBackward {
  static constexpr bool kElementwise = true;
};
// reads [logits N x V, targets i32 N]; writes [dlogits N x V, loss f32 1].
// Per row: p = softmax(logits) (max subtracted); loss = mean over rows of -log p[target];
// dlogits = (p - onehot(target)) * grad_scale. Precisely: e = exp(l - max), s = sum of e in
// order, p = e / s, row loss = -log(p[target]); loss = (float sum of row losses in row
// order) / N. A target outside [0, V) is a program bug (InternalError).
struct SoftmaxCrossEntropy {
  static constexpr bool kElementwise = false;
  int64_t rows = 0, vocab = 0;
  double grad_scale = 1.0;
};
// reads [param, grad, m, v] and, when has_coef, [coef f64 1]; writes [param, m, v].
// AdamW: g = grad*coef; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
// mhat = m/(1-b1^step); vhat = v/(1-b2^step);
// param = param - lr*(mhat/(sqrt(vhat)+eps) + weight_decay*param). All fp32.
// The scalars b1, b2, 1-b1, 1-b2, lr, eps, weight_decay and the bias corrections 1-b^step
// are computed in double (std::pow) and cast to float once; coef is cast to float; mhat uses
// the new m before it is rounded to m's dtype. writes are the same ranges as reads 0, 2, 3
// (in place), and step >= 1. Passing coef to the builder sets has_coef.
struct Adam {
  static constexpr bool kElementwise = false;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;
  bool has_coef = false;
};
// reads [param, grad] and, when has_coef, [coef f64 1]; writes [param]:
// param = param - lr*(grad*coef + weight_decay*param). fp32; writes[0] is reads[0].
struct Sgd {
  static constexpr bool kElementwise = false;
  double lr = 1e-2, weight_decay = 0.0;
  bool has_coef = false;
};
// reads [x] (and [acc f64 1] when accumulate); writes [acc f64 1]:
// acc = (accumulate ? acc : 0) + sum of (double)x[i]^2, added in the fixed tree of
// summation_order.hpp (a function of the length alone). The sum starts from 0.0 and is added
// to acc at the end; x may be f32, bf16 or f64; when accumulate, the
// builder puts acc in reads[1].
struct SumSquares {
  static constexpr bool kElementwise = false;
  bool accumulate = false;
};
// reads [sumsq f64 1]; writes [coef f64 1, norm f64 1]: norm = sqrt(sumsq);
// coef = max_norm > 0 ? min(1, max_norm / (norm + 1e-6)) : 1, in double; std::min(1.0, NaN)
// is 1, so a NaN norm leaves coef at 1.
struct ClipCoef {
  static constexpr bool kElementwise = false;
  double max_norm = 0.0;
};
}  // namespace kernel

using KernelParams =
    std::variant<kernel::Opaque, kernel::Fill, kernel::Copy, kernel::Add, kernel::Scale, kernel::Divide,
                 kernel::RoundBf16, kernel::RoundToGrid, kernel::EmbeddingForward, kernel::EmbeddingBackward,
                 kernel::LayerNormForward, kernel::LayerNormBackward, kernel::Gemm, kernel::BiasAdd,
                 kernel::BiasGelu, kernel::BiasGrad, kernel::GeluForward, kernel::GeluBackward,
                 kernel::SoftmaxCrossEntropy, kernel::Adam, kernel::Sgd, kernel::SumSquares,
                 kernel::ClipCoef>;

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
// An opaque kernel that is elementwise over reads and writes of one size (kernel::Opaque).
KernelCall opaque_elementwise(std::string name, StreamId s, std::vector<TensorRef> reads,
                              std::vector<TensorRef> writes);
KernelCall fill(StreamId s, TensorRef out, double value, std::string name = "fill");
KernelCall copy(StreamId s, TensorRef in, TensorRef out, std::string name = "copy");
KernelCall add(StreamId s, TensorRef a, TensorRef b, TensorRef out, std::string name = "add");
KernelCall scale(StreamId s, TensorRef in, TensorRef out, double factor, std::string name = "scale");
KernelCall divide(StreamId s, TensorRef in, TensorRef out, double divisor, std::string name = "divide");
KernelCall round_bf16(StreamId s, TensorRef in, TensorRef out, std::string name = "round_bf16");
KernelCall round_to_grid(StreamId s, TensorRef in, TensorRef out, double q, double limit,
                         std::string name = "round_to_grid");
KernelCall embedding_forward(StreamId s, TensorRef tokens, TensorRef weight, TensorRef out, int64_t vocab,
                             int64_t hidden);
KernelCall embedding_backward(StreamId s, TensorRef tokens, TensorRef dout, TensorRef dweight, int64_t vocab,
                              int64_t hidden, bool round_bf16 = false);
KernelCall layernorm_forward(StreamId s, TensorRef x, TensorRef gamma, TensorRef beta, TensorRef y,
                             TensorRef mean, TensorRef rstd, int64_t rows, int64_t hidden, double eps = 1e-5);
KernelCall layernorm_backward(StreamId s, TensorRef dy, TensorRef x, TensorRef gamma, TensorRef mean,
                              TensorRef rstd, TensorRef dx, TensorRef dgamma, TensorRef dbeta, int64_t rows,
                              int64_t hidden, bool round_bf16 = false);
KernelCall gemm(StreamId s, TensorRef a, TensorRef b, TensorRef c, kernel::Gemm shape,
                std::string name = "gemm");
KernelCall bias_add(StreamId s, TensorRef x, TensorRef bias, TensorRef y, int64_t rows, int64_t cols);
// pre = x + bias, y = gelu(pre): bias_add then gelu_forward in one kernel.
KernelCall bias_gelu(StreamId s, TensorRef x, TensorRef bias, TensorRef pre, TensorRef y, int64_t rows,
                     int64_t cols);
KernelCall bias_grad(StreamId s, TensorRef dy, TensorRef dbias, int64_t rows, int64_t cols,
                     bool round_bf16 = false);
KernelCall gelu_forward(StreamId s, TensorRef x, TensorRef y);
KernelCall gelu_backward(StreamId s, TensorRef x, TensorRef dy, TensorRef dx);
KernelCall softmax_cross_entropy(StreamId s, TensorRef logits, TensorRef targets, TensorRef dlogits,
                                 TensorRef loss, int64_t rows, int64_t vocab, double grad_scale);
KernelCall adam(StreamId s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                std::optional<TensorRef> coef, kernel::Adam hyper, std::string name = "adam");
KernelCall sgd(StreamId s, TensorRef param, TensorRef grad, std::optional<TensorRef> coef, kernel::Sgd hyper,
               std::string name = "sgd");
KernelCall sum_squares(StreamId s, TensorRef x, TensorRef acc, bool accumulate,
                       std::string name = "sum_squares");
KernelCall clip_coef(StreamId s, TensorRef sumsq, TensorRef coef, TensorRef norm, double max_norm);
}  // namespace kernels

// Resolves a TensorRef to host-addressable bytes (the simulator's device memory, or a test's
// vectors). Returns a pointer to the first element of the range.
class MemoryView {
 public:
  virtual ~MemoryView() = default;
  virtual std::byte* data(const TensorRef& ref) = 0;
  // Polled by kernels whose loops can run for seconds (the opaque pattern over a large
  // buffer): a set flag stops the kernel midway with core::Cancelled.
  CancelToken cancel;
};

// Runs a kernel on the CPU. Throws InternalError when its arguments are inconsistent.
void execute_cpu(const KernelCall& call, MemoryView& memory);
// Checks argument counts, sizes and dtypes: ok, or why not.
Status check_kernel(const KernelCall& call);

// Element access in a buffer of any float dtype, computing in double.
double load_element(const std::byte* base, DType t, int64_t i);
void store_element(std::byte* base, DType t, int64_t i, double v);

}  // namespace shardcheck::core
