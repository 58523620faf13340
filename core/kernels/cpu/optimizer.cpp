// Adam (AdamW) and SGD steps, the CPU twin of gpu/optimizer.cu: one fp32 update per element,
// in place, with no sums. Each product and sum rounds on its own, in the order written, from
// float constants computed once in double; the GPU kernels give the same bits.
#include <cmath>
#include <string>

#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"

namespace shardcheck::core::cpu {

namespace {

// Adam's and Sgd's gradient factor: the f64 clip coefficient, cast to float once.
float coef_of(const KernelCall& c, bool has_coef, MemoryView& mem) {
  return has_coef ? static_cast<float>(load_scalar(mem, c.reads.back())) : 1.0f;
}

}  // namespace

std::string check(const KernelCall& c, const kernel::Adam& k) {
  ArgCheck a(c);
  a.counts(k.has_coef ? 5 : 4, 3)
      .require(k.step >= 1, "step counts from 1 (bias correction divides by 1 - b^step)");
  const int64_t n = len(c.reads, 0);
  a.read(0, "param", Kind::floating, n, "any").read(1, "grad", Kind::floating, n, "param's length");
  a.read(2, "m", Kind::floating, n, "param's length").read(3, "v", Kind::floating, n, "param's length");
  if (k.has_coef) a.read(4, "coef", Kind::f64, 1, "a scalar");
  return a.same(0, 0, "param").same(1, 2, "m").same(2, 3, "v").message();
}

// Scalar constants are computed once, in double, and cast to float: lr, eps, weight_decay, b1,
// b2, 1 - b1, 1 - b2 and the bias corrections 1 - b^step (std::pow; a GPU launcher computes
// them on the host with this same code and passes floats). Per element everything is fp32, in
// the header's order. mhat uses the new m before it is rounded to m's dtype.
void execute(const KernelCall& c, const kernel::Adam& k, MemoryView& mem) {
  Floats param = load_floats(mem, c.reads[0]);
  const Floats grad = load_floats(mem, c.reads[1]);
  Floats m = load_floats(mem, c.reads[2]), v = load_floats(mem, c.reads[3]);
  const float coef = coef_of(c, k.has_coef, mem);
  const float b1 = static_cast<float>(k.beta1), b2 = static_cast<float>(k.beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - k.beta1),
              one_minus_b2 = static_cast<float>(1.0 - k.beta2);
  const float lr = static_cast<float>(k.lr), eps = static_cast<float>(k.eps);
  const float wd = static_cast<float>(k.weight_decay);
  const double step = static_cast<double>(k.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(k.beta1, step));
  const float bc2 = static_cast<float>(1.0 - std::pow(k.beta2, step));
  for (size_t i = 0; i < param.size(); ++i) {
    const float g = k.has_coef ? grad[i] * coef : grad[i];
    m[i] = b1 * m[i] + one_minus_b1 * g;
    v[i] = b2 * v[i] + (one_minus_b2 * g) * g;
    const float mhat = m[i] / bc1, vhat = v[i] / bc2;
    param[i] = param[i] - lr * (mhat / (std::sqrt(vhat) + eps) + wd * param[i]);
  }
  store_floats(mem, c.writes[0], param);
  store_floats(mem, c.writes[1], m);
  store_floats(mem, c.writes[2], v);
}

std::string check(const KernelCall& c, const kernel::Sgd& k) {
  ArgCheck a(c);
  a.counts(k.has_coef ? 3 : 2, 1);
  const int64_t n = len(c.reads, 0);
  a.read(0, "param", Kind::floating, n, "any").read(1, "grad", Kind::floating, n, "param's length");
  if (k.has_coef) a.read(2, "coef", Kind::f64, 1, "a scalar");
  return a.same(0, 0, "param").message();
}

void execute(const KernelCall& c, const kernel::Sgd& k, MemoryView& mem) {
  Floats param = load_floats(mem, c.reads[0]);
  const Floats grad = load_floats(mem, c.reads[1]);
  const float coef = coef_of(c, k.has_coef, mem);
  const float lr = static_cast<float>(k.lr), wd = static_cast<float>(k.weight_decay);
  for (size_t i = 0; i < param.size(); ++i) {
    const float g = k.has_coef ? grad[i] * coef : grad[i];
    param[i] = param[i] - lr * (g + wd * param[i]);
  }
  store_floats(mem, c.writes[0], param);
}

}  // namespace shardcheck::core::cpu
