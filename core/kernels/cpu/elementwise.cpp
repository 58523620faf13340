// Elementwise kernels, the CPU twin of gpu/elementwise.cu: fill, copy, add, scale, divide,
// round_bf16, round_to_grid, bias_add and the opaque pattern. Each output element comes from
// its own inputs alone, with no sums and so no order to keep; the GPU kernels give the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/base/rng.hpp"
#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"
#include "core/kernels/cpu/simd.hpp"

namespace shardcheck::core::cpu {

namespace {

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
  for (const auto& t : c.reads)
    if (t.dtype == DType::f64) return true;
  for (const auto& t : c.writes)
    if (t.dtype == DType::f64) return true;
  return false;
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
  constexpr int64_t kPollBytes = (int64_t{1} << 22) - 1;  // polls every 4 MiB
  uint32_t h = static_cast<uint32_t>(fnv1a(c.name));
  for (const TensorRef& w : c.writes) {
    std::byte* p = mem.data(w);
    for (int64_t i = 0; i < w.bytes(); ++i) {
      if ((i & kPollBytes) == 0) mem.cancel.poll();
      const uint32_t word = 0x3f800000u | ((h + static_cast<uint32_t>(i / 4) * 0x9e3779b9u) & 0x7fffffu);
      p[i] = static_cast<std::byte>((word >> ((i % 4) * 8)) & 0xff);
    }
  }
}

// Fill, Copy, Add, Scale and Divide compute in float for f32/bf16 operands and in double when
// any operand is f64, as the CUDA kernels do, so the two backends agree bit for bit.
template <class F>
void elementwise_any(const KernelCall& c, MemoryView& mem, F f) {
  if (any_f64(c)) {
    elementwise<double>(c, mem, f);
  } else {
    elementwise<float>(c, mem, f);
  }
}

// round_to_grid's loop: x = (float)(q * round_half_even(clamp((double)x * inv_q or / q))).
// Where q is a power of two (the grids exact mode uses), (double)x / q and (double)x * (1 / q)
// are the same number, exactly, whatever x: 1 / q is exact and neither operation rounds (or
// both round the same exact value), so the loop multiplies, which vectorizes at full width.
[[gnu::always_inline]] inline void round_to_grid_loop_body(float* v, size_t n, double q, double limit,
                                                           double inv_q) {
  if (inv_q != 0.0) {
    for (size_t i = 0; i < n; ++i) {
      const double units = std::clamp(static_cast<double>(v[i]) * inv_q, -limit, limit);
      v[i] = static_cast<float>(q * detail::round_half_even(units));
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const double units = std::clamp(static_cast<double>(v[i]) / q, -limit, limit);
    v[i] = static_cast<float>(q * detail::round_half_even(units));
  }
}
SHARDCHECK_SIMD_LEVELS(round_to_grid_loop, (float* v, size_t n, double q, double limit, double inv_q),
                       (v, n, q, limit, inv_q))

// 1 / q when q is a power of two whose reciprocal is a normal T (so exact), else 0. Then x / q
// and x * (1 / q) are correctly rounded values of one real number: the same bits for every x.
template <class T>
T exact_reciprocal(T q) {
  int e = 0;
  if (!std::isfinite(q) || std::frexp(q, &e) != T(0.5)) return T(0);
  const T inv = T(1) / q;
  return std::isnormal(inv) && inv * q == T(1) ? inv : T(0);
}

// out[i] = in[i] * f over f32 bytes, element by element in order (in and out may be the same).
[[gnu::always_inline]] inline void multiply_f32_loop_body(const std::byte* in, std::byte* out, size_t n,
                                                          float f) {
  for (size_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, in + 4 * i, 4);
    x = x * f;
    std::memcpy(out + 4 * i, &x, 4);
  }
}
SHARDCHECK_SIMD_LEVELS(multiply_f32_loop, (const std::byte* in, std::byte* out, size_t n, float f),
                       (in, out, n, f))

}  // namespace

std::string check(const KernelCall&, const kernel::Opaque&) { return std::string(); }

void execute(const KernelCall& c, const kernel::Opaque&, MemoryView& mem) { opaque_pattern(c, mem); }

std::string check(const KernelCall& c, const kernel::Fill&) { return expect_counts(c, 0, 1); }

void execute(const KernelCall& c, const kernel::Fill& k, MemoryView& mem) {
  elementwise_any(c, mem, [&](auto a, auto) { return static_cast<decltype(a)>(k.value); });
}

std::string check(const KernelCall& c, const kernel::Copy&) {
  auto e = expect_counts(c, 1, 1);
  return e.empty() ? expect_same_numel(c) : e;
}

void execute(const KernelCall& c, const kernel::Copy&, MemoryView& mem) {
  elementwise_any(c, mem, [](auto a, auto) { return a; });
}

std::string check(const KernelCall& c, const kernel::Add&) {
  auto e = expect_counts(c, 2, 1);
  return e.empty() ? expect_same_numel(c) : e;
}

void execute(const KernelCall& c, const kernel::Add&, MemoryView& mem) {
  elementwise_any(c, mem, [](auto a, auto b) { return a + b; });
}

std::string check(const KernelCall& c, const kernel::Scale&) {
  auto e = expect_counts(c, 1, 1);
  return e.empty() ? expect_same_numel(c) : e;
}

void execute(const KernelCall& c, const kernel::Scale& k, MemoryView& mem) {
  elementwise_any(c, mem, [&](auto a, auto) { return a * static_cast<decltype(a)>(k.factor); });
}

std::string check(const KernelCall& c, const kernel::Divide& d) {
  auto e = expect_counts(c, 1, 1);
  if (e.empty() && d.divisor == 0.0) e = "kernel '" + c.name + "' divides by zero";
  return e.empty() ? expect_same_numel(c) : e;
}

// Dividing f32 by a power of two (gradient averaging over 2^k ranks or microbatches) multiplies
// by the exact reciprocal instead: the same bits, and a loop that vectorizes.
void execute(const KernelCall& c, const kernel::Divide& k, MemoryView& mem) {
  const float inv = exact_reciprocal(static_cast<float>(k.divisor));
  if (inv != 0.0f && c.reads[0].dtype == DType::f32 && c.writes[0].dtype == DType::f32) {
    multiply_f32_loop(mem.data(c.reads[0]), mem.data(c.writes[0]), static_cast<size_t>(c.writes[0].numel),
                      inv);
    return;
  }
  elementwise_any(c, mem, [&](auto a, auto) { return a / static_cast<decltype(a)>(k.divisor); });
}

std::string check(const KernelCall& c, const kernel::RoundBf16&) {
  ArgCheck a(c);
  a.counts(1, 1).write(0, "out", Kind::floating, len(c.writes, 0), "any");
  return a.read(0, "in", Kind::floating, len(c.writes, 0), "the output's length").message();
}

void execute(const KernelCall& c, const kernel::RoundBf16&, MemoryView& mem) {
  Floats v = load_floats(mem, c.reads[0]);
  for (float& x : v) x = round_bf16(x);
  store_floats(mem, c.writes[0], v);
}

std::string check(const KernelCall& c, const kernel::RoundToGrid& k) {
  ArgCheck a(c);
  a.counts(1, 1).require(k.q > 0 && std::isfinite(k.q), "the grid step q must be positive and finite");
  a.require(k.limit >= 0 && std::isfinite(k.limit), "limit must be non-negative and finite");
  a.write(0, "out", Kind::floating, len(c.writes, 0), "any");
  return a.read(0, "in", Kind::floating, len(c.writes, 0), "the output's length").message();
}

double round_half_even(double u) { return detail::round_half_even(u); }

// y = (float)(q * nearbyint(clamp((double)x / q, -limit, limit))): rounds half to even, as
// nearbyint does in the default rounding mode, but in plain operations, so the loop vectorizes.
// NaN stays NaN; infinities clamp to the limit.
void execute(const KernelCall& c, const kernel::RoundToGrid& k, MemoryView& mem) {
  if (float* out = f32_output_from(mem, c.reads[0], c.writes[0])) {
    round_to_grid_loop(out, static_cast<size_t>(c.writes[0].numel), k.q, k.limit, exact_reciprocal(k.q));
    return;
  }
  Floats v = load_floats(mem, c.reads[0]);
  round_to_grid_loop(v.data(), v.size(), k.q, k.limit, exact_reciprocal(k.q));
  store_floats(mem, c.writes[0], v);
}

std::string check(const KernelCall& c, const kernel::BiasAdd& k) {
  ArgCheck a(c);
  const int64_t nc = numel_of({k.rows, k.cols});
  a.counts(2, 1).require(nc >= 0, "rows and cols must be non-negative");
  a.read(0, "x", Kind::floating, nc, "N x C").read(1, "bias", Kind::floating, k.cols, "C");
  return a.write(0, "y", Kind::floating, nc, "N x C").message();
}

void execute(const KernelCall& c, const kernel::BiasAdd& k, MemoryView& mem) {
  const Floats bias = load_floats(mem, c.reads[1]);
  const size_t rows = static_cast<size_t>(k.rows), cols = static_cast<size_t>(k.cols);
  auto add = [&](float* y) {
    for (size_t n = 0; n < rows; ++n) {
      for (size_t j = 0; j < cols; ++j) y[n * cols + j] += bias[j];
    }
  };
  // In y's own memory: the bias was copied first, so it may lie anywhere.
  if (float* y = f32_output_from(mem, c.reads[0], c.writes[0])) {
    add(y);
    return;
  }
  Floats y = load_floats(mem, c.reads[0]);
  add(y.data());
  store_floats(mem, c.writes[0], y);
}

std::string check(const KernelCall& c, const kernel::BiasGelu& k) {
  ArgCheck a(c);
  const int64_t nc = numel_of({k.rows, k.cols});
  a.counts(2, 2).require(nc >= 0, "rows and cols must be non-negative");
  a.read(0, "x", Kind::floating, nc, "N x C").read(1, "bias", Kind::floating, k.cols, "C");
  a.write(0, "pre", Kind::floating, nc, "N x C").write(1, "y", Kind::floating, nc, "N x C");
  // The GPU runs it one element per thread: y may not alias what another element reads.
  if (a.message().empty() && (overlaps(c.writes[1], c.reads[0]) || overlaps(c.writes[1], c.writes[0])))
    a.require(false, "y (writes[1]) must not overlap x or pre");
  return a.message();
}

// BiasAdd into pre, then GeluForward of pre as stored (rounded to its dtype): the same bits as
// the two kernels one after the other.
void execute(const KernelCall& c, const kernel::BiasGelu& k, MemoryView& mem) {
  execute(c, kernel::BiasAdd{k.rows, k.cols}, mem);
  KernelCall gelu;
  gelu.reads = {c.writes[0]};
  gelu.writes = {c.writes[1]};
  execute(gelu, kernel::GeluForward{}, mem);
}

}  // namespace shardcheck::core::cpu
