// LayerNorm forward and backward, the CPU twin of gpu/layernorm.cu. Each row's sums run over
// h = 0..H-1 in one fp32 accumulator; the backward's dgamma and dbeta sum each column over
// rows in the chunked order of core/kernels/summation_order.hpp. The GPU kernels keep both
// orders, bit for bit.
#include <cmath>
#include <string>

#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"
#include "core/kernels/summation_order.hpp"

namespace shardcheck::core::cpu {

std::string check(const KernelCall& c, const kernel::LayerNormForward& k) {
  ArgCheck a(c);
  const int64_t nh = numel_of({k.rows, k.hidden});
  a.counts(3, 3).require(k.rows >= 0 && k.hidden > 0 && nh >= 0, "rows must be >= 0 and hidden > 0");
  a.require(k.eps >= 0, "eps must be non-negative");
  a.read(0, "x", Kind::floating, nh, "N x H").read(1, "gamma", Kind::floating, k.hidden, "H");
  a.read(2, "beta", Kind::floating, k.hidden, "H").write(0, "y", Kind::floating, nh, "N x H");
  a.write(1, "mean", Kind::floating, k.rows, "N").write(2, "rstd", Kind::floating, k.rows, "N");
  return a.message();
}

void execute(const KernelCall& c, const kernel::LayerNormForward& k, MemoryView& mem) {
  const Floats x = load_floats(mem, c.reads[0]);
  const Floats gamma = load_floats(mem, c.reads[1]);
  const Floats beta = load_floats(mem, c.reads[2]);
  const size_t rows = static_cast<size_t>(k.rows), h = static_cast<size_t>(k.hidden);
  const float hf = static_cast<float>(k.hidden), eps = static_cast<float>(k.eps);
  Floats y(rows * h), mean(rows), rstd(rows);
  for (size_t n = 0; n < rows; ++n) {
    const float* xr = x.data() + n * h;
    float sum = 0.0f;
    for (size_t j = 0; j < h; ++j) sum += xr[j];
    const float mu = sum / hf;
    float sq = 0.0f;
    for (size_t j = 0; j < h; ++j) {
      const float d = xr[j] - mu;
      sq += d * d;
    }
    const float rs = 1.0f / std::sqrt(sq / hf + eps);  // IEEE sqrt and division, not rsqrt
    for (size_t j = 0; j < h; ++j) y[n * h + j] = ((xr[j] - mu) * rs) * gamma[j] + beta[j];
    mean[n] = mu;
    rstd[n] = rs;
  }
  store_floats(mem, c.writes[0], y);
  store_floats(mem, c.writes[1], mean);
  store_floats(mem, c.writes[2], rstd);
}

std::string check(const KernelCall& c, const kernel::LayerNormBackward& k) {
  ArgCheck a(c);
  const int64_t nh = numel_of({k.rows, k.hidden});
  a.counts(5, 3).require(k.rows >= 0 && k.hidden > 0 && nh >= 0, "rows must be >= 0 and hidden > 0");
  a.read(0, "dy", Kind::floating, nh, "N x H").read(1, "x", Kind::floating, nh, "N x H");
  a.read(2, "gamma", Kind::floating, k.hidden, "H").read(3, "mean", Kind::floating, k.rows, "N");
  a.read(4, "rstd", Kind::floating, k.rows, "N").write(0, "dx", Kind::floating, nh, "N x H");
  a.write(1, "dgamma", Kind::floating, k.hidden, "H").write(2, "dbeta", Kind::floating, k.hidden, "H");
  return a.message();
}

void execute(const KernelCall& c, const kernel::LayerNormBackward& k, MemoryView& mem) {
  const Floats dy = load_floats(mem, c.reads[0]), x = load_floats(mem, c.reads[1]);
  const Floats gamma = load_floats(mem, c.reads[2]);
  const Floats mean = load_floats(mem, c.reads[3]), rstd = load_floats(mem, c.reads[4]);
  const size_t rows = static_cast<size_t>(k.rows), h = static_cast<size_t>(k.hidden);
  const float hf = static_cast<float>(k.hidden);
  Floats dx(rows * h);
  ChunkedColumnSum dgamma(h), dbeta(h);
  for (size_t n = 0; n < rows; ++n) {
    const float* xr = x.data() + n * h;
    const float* dyr = dy.data() + n * h;
    const float mu = mean[n], rs = rstd[n];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (size_t j = 0; j < h; ++j) {
      const float xhat = (xr[j] - mu) * rs;
      const float g = dyr[j] * gamma[j];
      sum_g += g;
      sum_gx += g * xhat;
    }
    const float mean_g = sum_g / hf, mean_gx = sum_gx / hf;
    for (size_t j = 0; j < h; ++j) {
      const float xhat = (xr[j] - mu) * rs;
      const float g = dyr[j] * gamma[j];
      dx[n * h + j] = rs * ((g - mean_g) - xhat * mean_gx);
      dgamma.add(j, dyr[j] * xhat);
      dbeta.add(j, dyr[j]);
    }
    dgamma.end_row();
    dbeta.end_row();
  }
  store_floats(mem, c.writes[0], dx);
  store_floats(mem, c.writes[1], rounded_if(k.round_bf16, dgamma.finish()));
  store_floats(mem, c.writes[2], rounded_if(k.round_bf16, dbeta.finish()));
}

}  // namespace shardcheck::core::cpu
