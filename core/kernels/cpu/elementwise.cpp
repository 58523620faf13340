// Elementwise kernels, the CPU twin of gpu/elementwise.cu: round_bf16, round_to_grid and
// bias_add. Each output element is computed from its own inputs alone, with no sums, so there
// is no order to keep; the GPU kernels give the same bits.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"

namespace shardcheck::core::cpu {

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

// y = (float)(q * nearbyint(clamp((double)x / q, -limit, limit))): rounds half to even in the
// default rounding mode. NaN stays NaN; infinities clamp to the limit.
void execute(const KernelCall& c, const kernel::RoundToGrid& k, MemoryView& mem) {
  Floats v = load_floats(mem, c.reads[0]);
  for (float& x : v) {
    const double units = std::clamp(static_cast<double>(x) / k.q, -k.limit, k.limit);
    x = static_cast<float>(k.q * std::nearbyint(units));
  }
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
  Floats y = load_floats(mem, c.reads[0]);
  const Floats bias = load_floats(mem, c.reads[1]);
  const size_t rows = static_cast<size_t>(k.rows), cols = static_cast<size_t>(k.cols);
  for (size_t n = 0; n < rows; ++n) {
    for (size_t j = 0; j < cols; ++j) y[n * cols + j] += bias[j];
  }
  store_floats(mem, c.writes[0], y);
}

}  // namespace shardcheck::core::cpu
