// Reductions, the CPU twin of gpu/reductions.cu. bias_grad sums each column over rows in fp32,
// in the chunked order of core/kernels/summation_order.hpp; sum_squares adds (double)x[i]^2 in
// that header's fixed tree; clip_coef is a few double operations. The GPU matches all three
// bit for bit.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"
#include "core/kernels/summation_order.hpp"

namespace shardcheck::core::cpu {

std::string check(const KernelCall& c, const kernel::BiasGrad& k) {
  ArgCheck a(c);
  const int64_t nc = numel_of({k.rows, k.cols});
  a.counts(1, 1).require(nc >= 0, "rows and cols must be non-negative");
  return a.read(0, "dy", Kind::floating, nc, "N x C")
      .write(0, "dbias", Kind::floating, k.cols, "C")
      .message();
}

void execute(const KernelCall& c, const kernel::BiasGrad& k, MemoryView& mem) {
  const Floats dy = load_floats(mem, c.reads[0]);
  const size_t rows = static_cast<size_t>(k.rows), cols = static_cast<size_t>(k.cols);
  ChunkedColumnSum dbias(cols);
  for (size_t n = 0; n < rows; ++n) {
    for (size_t j = 0; j < cols; ++j) dbias.add(j, dy[n * cols + j]);
    dbias.end_row();
  }
  store_floats(mem, c.writes[0], rounded_if(k.round_bf16, dbias.finish()));
}

std::string check(const KernelCall& c, const kernel::SumSquares& k) {
  ArgCheck a(c);
  a.counts(k.accumulate ? 2 : 1, 1);
  a.read(0, "x", Kind::any_float, len(c.reads, 0), "any");
  a.write(0, "acc", Kind::f64, 1, "a scalar");
  if (k.accumulate) a.same(0, 1, "acc (accumulate)");
  return a.message();
}

// The sum of squares starts from 0.0 and is added to the previous acc at the end, so a chunk's
// contribution does not depend on what was accumulated before it. Squares of f32 or bf16
// values are exact in double; only the additions round, in the fixed tree of
// summation_order.hpp, which the GPU runs too.
void execute(const KernelCall& c, const kernel::SumSquares& k, MemoryView& mem) {
  const TensorRef& x = c.reads[0];
  double sum = 0.0;
  if (x.dtype == DType::f64) {
    const std::byte* p = x.numel > 0 ? mem.data(x) : nullptr;
    sum = fixed_tree_sum(x.numel, [&](int64_t i) {
      const double d = load_element(p, DType::f64, i);
      return d * d;
    });
  } else {
    const Floats f = load_floats(mem, x);
    sum = fixed_tree_sum(x.numel, [&](int64_t i) {
      const double d = static_cast<double>(f[static_cast<size_t>(i)]);
      return d * d;
    });
  }
  const double before = k.accumulate ? load_scalar(mem, c.reads[1]) : 0.0;
  store_scalar(mem, c.writes[0], before + sum);
}

std::string check(const KernelCall& c, const kernel::ClipCoef&) {
  ArgCheck a(c);
  a.counts(1, 2).read(0, "sumsq", Kind::f64, 1, "a scalar");
  return a.write(0, "coef", Kind::f64, 1, "a scalar").write(1, "norm", Kind::f64, 1, "a scalar").message();
}

// std::min(1.0, q) is 1 when q is NaN (a NaN norm does not scale the gradients to NaN; they
// are NaN already).
void execute(const KernelCall& c, const kernel::ClipCoef& k, MemoryView& mem) {
  const double norm = std::sqrt(load_scalar(mem, c.reads[0]));
  const double coef = k.max_norm > 0 ? std::min(1.0, k.max_norm / (norm + 1e-6)) : 1.0;
  store_scalar(mem, c.writes[0], coef);
  store_scalar(mem, c.writes[1], norm);
}

}  // namespace shardcheck::core::cpu
