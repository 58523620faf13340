// Kernel builders, argument checks and the CPU reference implementation of every kernel.
// Arithmetic happens in float for f32/bf16 operands and in double when any operand is f64,
// as the CUDA kernels do, so the two backends agree bit for bit.
#include <cstring>
#include <type_traits>

#include "core/kernels/kernels.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/base/overloaded.hpp"
#include "core/base/rng.hpp"
#include "core/base/status.hpp"

namespace shardcheck::core {

namespace {

KernelCall make(std::string name, StreamId s, std::vector<TensorRef> reads,
                std::vector<TensorRef> writes, KernelParams p) {
  return KernelCall{std::move(name), s, std::move(reads), std::move(writes), p};
}

std::string expect_counts(const KernelCall& c, size_t reads, size_t writes) {
  if (c.reads.size() != reads || c.writes.size() != writes) {
    return "kernel '" + c.name + "' takes " + std::to_string(reads) + " inputs and " +
           std::to_string(writes) + " outputs";
  }
  return "";
}

std::string expect_same_numel(const KernelCall& c) {
  for (const auto* list : {&c.reads, &c.writes}) {
    for (const TensorRef& t : *list) {
      if (t.numel != c.writes[0].numel) {
        return "kernel '" + c.name + "': elementwise operands differ in length";
      }
    }
  }
  return "";
}

bool any_f64(const KernelCall& c) {
  for (const auto& t : c.reads) if (t.dtype == DType::f64) return true;
  for (const auto& t : c.writes) if (t.dtype == DType::f64) return true;
  return false;
}

template <class C>
C load(const std::byte* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32: { float v; std::memcpy(&v, base + 4 * i, 4); return static_cast<C>(v); }
    case DType::bf16: { uint16_t h; std::memcpy(&h, base + 2 * i, 2); return static_cast<C>(from_bf16(h)); }
    case DType::f64: { double v; std::memcpy(&v, base + 8 * i, 8); return static_cast<C>(v); }
    case DType::i32: { int32_t v; std::memcpy(&v, base + 4 * i, 4); return static_cast<C>(v); }
    case DType::i64: { int64_t v; std::memcpy(&v, base + 8 * i, 8); return static_cast<C>(v); }
    case DType::u8: return static_cast<C>(static_cast<uint8_t>(base[i]));
  }
  return C{};
}

template <class C>
void store(std::byte* base, DType t, int64_t i, C v) {
  switch (t) {
    case DType::f32: { float f = static_cast<float>(v); std::memcpy(base + 4 * i, &f, 4); return; }
    case DType::bf16: { uint16_t h = to_bf16(static_cast<float>(v)); std::memcpy(base + 2 * i, &h, 2); return; }
    case DType::f64: { double d = static_cast<double>(v); std::memcpy(base + 8 * i, &d, 8); return; }
    case DType::i32: { int32_t x = static_cast<int32_t>(v); std::memcpy(base + 4 * i, &x, 4); return; }
    case DType::i64: { int64_t x = static_cast<int64_t>(v); std::memcpy(base + 8 * i, &x, 8); return; }
    case DType::u8: base[i] = static_cast<std::byte>(static_cast<uint8_t>(v)); return;
  }
}

// The all-f32 case, which is most of the work: no per-element dtype dispatch.
template <class F>
bool elementwise_f32(const KernelCall& c, MemoryView& mem, F f) {
  if (c.writes[0].dtype != DType::f32) return false;
  for (const TensorRef& r : c.reads) {
    if (r.dtype != DType::f32) return false;
  }
  std::byte* out = mem.data(c.writes[0]);
  const std::byte* a = c.reads.size() > 0 ? mem.data(c.reads[0]) : nullptr;
  const std::byte* b = c.reads.size() > 1 ? mem.data(c.reads[1]) : nullptr;
  const int64_t n = c.writes[0].numel;
  for (int64_t i = 0; i < n; ++i) {
    float x = 0, y = 0;
    if (a) std::memcpy(&x, a + 4 * i, 4);
    if (b) std::memcpy(&y, b + 4 * i, 4);
    const float r = f(x, y);
    std::memcpy(out + 4 * i, &r, 4);
  }
  return true;
}

// Applies f elementwise: out[i] = f(in0[i], in1[i], ...), computing in type C.
template <class C, class F>
void elementwise(const KernelCall& c, MemoryView& mem, F f) {
  if constexpr (std::is_same_v<C, float>) {
    if (elementwise_f32(c, mem, f)) return;
  }
  std::byte* out = mem.data(c.writes[0]);
  std::vector<const std::byte*> in;
  for (const TensorRef& r : c.reads) in.push_back(mem.data(r));
  const int64_t n = c.writes[0].numel;
  for (int64_t i = 0; i < n; ++i) {
    C a = in.size() > 0 ? load<C>(in[0], c.reads[0].dtype, i) : C{};
    C b = in.size() > 1 ? load<C>(in[1], c.reads[1].dtype, i) : C{};
    store<C>(out, c.writes[0].dtype, i, f(a, b));
  }
}

// Opaque kernels write a pattern that identifies the writer, so a race that lets another
// lifetime's data through shows up as wrong bytes, not only as a finding.
// The pattern is a run of little-endian 32-bit words, each a float in [1, 2): whatever
// dtype a program later reads the bytes as, sums of them stay finite, so two backends agree
// bit for bit (NaN payloads would not).
void opaque_pattern(const KernelCall& c, MemoryView& mem) {
  uint32_t h = static_cast<uint32_t>(fnv1a(c.name));
  for (const TensorRef& w : c.writes) {
    std::byte* p = mem.data(w);
    for (int64_t i = 0; i < w.bytes(); ++i) {
      const uint32_t word = 0x3f800000u | ((h + static_cast<uint32_t>(i / 4) * 0x9e3779b9u) & 0x7fffffu);
      p[i] = static_cast<std::byte>((word >> ((i % 4) * 8)) & 0xff);
    }
  }
}

}  // namespace

bool is_elementwise(const KernelParams& p) {
  return std::visit([](const auto& k) { return std::decay_t<decltype(k)>::kElementwise; }, p);
}

namespace kernels {
KernelCall opaque(std::string name, StreamId s, std::vector<TensorRef> reads, std::vector<TensorRef> writes) {
  return make(std::move(name), s, std::move(reads), std::move(writes), kernel::Opaque{});
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
                              int64_t hidden) {
  return make("embedding_backward", s, {tokens, dout}, {dweight}, kernel::EmbeddingBackward{vocab, hidden});
}
KernelCall layernorm_forward(StreamId s, TensorRef x, TensorRef gamma, TensorRef beta, TensorRef y,
                             TensorRef mean, TensorRef rstd, int64_t rows, int64_t hidden, double eps) {
  return make("layernorm_forward", s, {x, gamma, beta}, {y, mean, rstd},
              kernel::LayerNormForward{rows, hidden, eps});
}
KernelCall layernorm_backward(StreamId s, TensorRef dy, TensorRef x, TensorRef gamma, TensorRef mean,
                              TensorRef rstd, TensorRef dx, TensorRef dgamma, TensorRef dbeta, int64_t rows,
                              int64_t hidden) {
  return make("layernorm_backward", s, {dy, x, gamma, mean, rstd}, {dx, dgamma, dbeta},
              kernel::LayerNormBackward{rows, hidden});
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
KernelCall bias_grad(StreamId s, TensorRef dy, TensorRef dbias, int64_t rows, int64_t cols) {
  return make("bias_grad", s, {dy}, {dbias}, kernel::BiasGrad{rows, cols});
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

std::string check_kernel(const KernelCall& c) {
  return std::visit(
      Overloaded{
          [&](const kernel::Opaque&) { return std::string(); },
          [&](const kernel::Fill&) { return expect_counts(c, 0, 1); },
          [&](const kernel::Copy&) {
            auto e = expect_counts(c, 1, 1);
            return e.empty() ? expect_same_numel(c) : e;
          },
          [&](const kernel::Add&) {
            auto e = expect_counts(c, 2, 1);
            return e.empty() ? expect_same_numel(c) : e;
          },
          [&](const kernel::Scale&) {
            auto e = expect_counts(c, 1, 1);
            return e.empty() ? expect_same_numel(c) : e;
          },
          [&](const kernel::Divide& d) {
            auto e = expect_counts(c, 1, 1);
            if (e.empty() && d.divisor == 0.0) e = "kernel '" + c.name + "' divides by zero";
            return e.empty() ? expect_same_numel(c) : e;
          },
          [&](const auto& k) { return cpu::check(c, k); },
      },
      c.params);
}

void execute_cpu(const KernelCall& c, MemoryView& mem) {
  if (std::string e = check_kernel(c); !e.empty()) throw InternalError(e);
  const bool wide = any_f64(c);
  auto run = [&](auto f) {
    if (wide) {
      elementwise<double>(c, mem, f);
    } else {
      elementwise<float>(c, mem, f);
    }
  };
  std::visit(Overloaded{
                 [&](const kernel::Opaque&) { opaque_pattern(c, mem); },
                 [&](const kernel::Fill& k) { run([&](auto a, auto) { return static_cast<decltype(a)>(k.value); }); },
                 [&](const kernel::Copy&) { run([](auto a, auto) { return a; }); },
                 [&](const kernel::Add&) { run([](auto a, auto b) { return a + b; }); },
                 [&](const kernel::Scale& k) {
                   run([&](auto a, auto) { return a * static_cast<decltype(a)>(k.factor); });
                 },
                 [&](const kernel::Divide& k) {
                   run([&](auto a, auto) { return a / static_cast<decltype(a)>(k.divisor); });
                 },
                 [&](const auto& k) { cpu::execute(c, k, mem); },
             },
             c.params);
}

double load_element(const std::byte* base, DType t, int64_t i) { return load<double>(base, t, i); }
void store_element(std::byte* base, DType t, int64_t i, double v) { store<double>(base, t, i, v); }

}  // namespace shardcheck::core
