// Argument checks and the CPU reference for the grid roundings and the TinyLM kernels
// (embedding, LayerNorm, GEMM, bias, GELU, softmax cross-entropy, Adam/SGD, gradient norm).
// kernels.cpp's std::visit calls dispatch here; the header states each kernel's semantics.
//
// Numerics, which a GPU port must reproduce: every input is widened to fp32 (bf16 exactly)
// into a scratch vector, arithmetic is fp32 in the loop orders the header gives, and each
// output is rounded to its dtype once, when stored. All inputs are read before any output is
// written, so in-place calls (Adam, Sgd, y == x) see their inputs as they were. The build
// forbids FMA contraction (-ffp-contract=off); nothing here calls std::fma. sqrt and the
// divisions are correctly rounded IEEE operations, so a GPU port matches them bit for bit
// (no rsqrt, no fast division); std::tanh, std::exp and std::log come from libm (tanhf,
// expf, logf), so a GPU port of GELU and softmax is compared with a tolerance.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"

namespace shardcheck::core::cpu {

namespace {

// Adam's and Sgd's gradient factor: the f64 clip coefficient, cast to float once.
float coef_of(const KernelCall& c, bool has_coef, MemoryView& mem) {
  return has_coef ? static_cast<float>(load_scalar(mem, c.reads.back())) : 1.0f;
}

// ---- GELU, tanh form. sqrt(2/pi) and 3 * 0.044715 as the nearest floats.
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kGeluCubic3 = 0.134145f;

// The shared front half of forward and backward: t = tanh(s * (x + c * ((x * x) * x))).
float gelu_tanh(float x) {
  const float cube = (x * x) * x;
  return std::tanh(kGeluScale * (x + kGeluCubic * cube));  // libm tanhf
}

}  // namespace

// ---- Checks, one per kernel.

std::string check(const KernelCall& c, const kernel::RoundBf16&) {
  ArgCheck a(c);
  a.counts(1, 1).write(0, "out", Kind::floating, len(c.writes, 0), "any");
  return a.read(0, "in", Kind::floating, len(c.writes, 0), "the output's length").message();
}

std::string check(const KernelCall& c, const kernel::RoundToGrid& k) {
  ArgCheck a(c);
  a.counts(1, 1).require(k.q > 0 && std::isfinite(k.q), "the grid step q must be positive and finite");
  a.require(k.limit >= 0 && std::isfinite(k.limit), "limit must be non-negative and finite");
  a.write(0, "out", Kind::floating, len(c.writes, 0), "any");
  return a.read(0, "in", Kind::floating, len(c.writes, 0), "the output's length").message();
}

std::string check(const KernelCall& c, const kernel::EmbeddingForward& k) {
  ArgCheck a(c);
  const int64_t vh = numel_of({k.vocab, k.hidden});
  a.counts(2, 1).require(k.vocab > 0 && k.hidden > 0 && vh > 0, "vocab and hidden must be positive");
  const int64_t n = len(c.reads, 0);
  a.read(0, "tokens", Kind::i32, n, "N").read(1, "weight", Kind::floating, vh, "V x H");
  return a.write(0, "out", Kind::floating, numel_of({n, k.hidden}), "N x H").message();
}

std::string check(const KernelCall& c, const kernel::EmbeddingBackward& k) {
  ArgCheck a(c);
  const int64_t vh = numel_of({k.vocab, k.hidden});
  a.counts(2, 1).require(k.vocab > 0 && k.hidden > 0 && vh > 0, "vocab and hidden must be positive");
  const int64_t n = len(c.reads, 0);
  a.read(0, "tokens", Kind::i32, n, "N").read(1, "dout", Kind::floating, numel_of({n, k.hidden}), "N x H");
  return a.write(0, "dweight", Kind::floating, vh, "V x H").message();
}

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

std::string check(const KernelCall& c, const kernel::Gemm& k) {
  ArgCheck a(c);
  const bool reads_c = k.beta != 0.0;
  a.require(c.reads.size() != 2 || !reads_c, "beta != 0 makes C an input: reads must be [A, B, C]");
  a.require(c.reads.size() != 3 || reads_c, "beta == 0 never reads C: reads must be [A, B]");
  a.counts(reads_c ? 3 : 2, 1).require(k.m >= 0 && k.n >= 0 && k.k >= 0, "m, n and k must be non-negative");
  const int64_t mk = numel_of({k.m, k.k}), kn = numel_of({k.k, k.n}), mn = numel_of({k.m, k.n});
  a.require(mk >= 0 && kn >= 0 && mn >= 0, "m x n x k is too large");
  a.read(0, "A", Kind::floating, mk, k.trans_a ? "K x M, trans_a" : "M x K");
  a.read(1, "B", Kind::floating, kn, k.trans_b ? "N x K, trans_b" : "K x N");
  a.write(0, "C", Kind::floating, mn, "M x N");
  if (reads_c) a.same(0, 2, "C (beta != 0)");
  return a.message();
}

std::string check(const KernelCall& c, const kernel::BiasAdd& k) {
  ArgCheck a(c);
  const int64_t nc = numel_of({k.rows, k.cols});
  a.counts(2, 1).require(nc >= 0, "rows and cols must be non-negative");
  a.read(0, "x", Kind::floating, nc, "N x C").read(1, "bias", Kind::floating, k.cols, "C");
  return a.write(0, "y", Kind::floating, nc, "N x C").message();
}

std::string check(const KernelCall& c, const kernel::BiasGrad& k) {
  ArgCheck a(c);
  const int64_t nc = numel_of({k.rows, k.cols});
  a.counts(1, 1).require(nc >= 0, "rows and cols must be non-negative");
  return a.read(0, "dy", Kind::floating, nc, "N x C")
      .write(0, "dbias", Kind::floating, k.cols, "C")
      .message();
}

std::string check(const KernelCall& c, const kernel::GeluForward&) {
  ArgCheck a(c);
  a.counts(1, 1).write(0, "y", Kind::floating, len(c.writes, 0), "any");
  return a.read(0, "x", Kind::floating, len(c.writes, 0), "y's length").message();
}

std::string check(const KernelCall& c, const kernel::GeluBackward&) {
  ArgCheck a(c);
  a.counts(2, 1).write(0, "dx", Kind::floating, len(c.writes, 0), "any");
  a.read(0, "x", Kind::floating, len(c.writes, 0), "dx's length");
  return a.read(1, "dy", Kind::floating, len(c.writes, 0), "dx's length").message();
}

std::string check(const KernelCall& c, const kernel::SoftmaxCrossEntropy& k) {
  ArgCheck a(c);
  const int64_t nv = numel_of({k.rows, k.vocab});
  a.counts(2, 2).require(k.rows > 0 && k.vocab > 0 && nv > 0, "rows and vocab must be positive");
  a.read(0, "logits", Kind::floating, nv, "N x V").read(1, "targets", Kind::i32, k.rows, "N");
  a.write(0, "dlogits", Kind::floating, nv, "N x V").write(1, "loss", Kind::f32, 1, "a scalar");
  return a.message();
}

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

std::string check(const KernelCall& c, const kernel::Sgd& k) {
  ArgCheck a(c);
  a.counts(k.has_coef ? 3 : 2, 1);
  const int64_t n = len(c.reads, 0);
  a.read(0, "param", Kind::floating, n, "any").read(1, "grad", Kind::floating, n, "param's length");
  if (k.has_coef) a.read(2, "coef", Kind::f64, 1, "a scalar");
  return a.same(0, 0, "param").message();
}

std::string check(const KernelCall& c, const kernel::SumSquares& k) {
  ArgCheck a(c);
  a.counts(k.accumulate ? 2 : 1, 1);
  a.read(0, "x", Kind::any_float, len(c.reads, 0), "any");
  a.write(0, "acc", Kind::f64, 1, "a scalar");
  if (k.accumulate) a.same(0, 1, "acc (accumulate)");
  return a.message();
}

std::string check(const KernelCall& c, const kernel::ClipCoef&) {
  ArgCheck a(c);
  a.counts(1, 2).read(0, "sumsq", Kind::f64, 1, "a scalar");
  return a.write(0, "coef", Kind::f64, 1, "a scalar").write(1, "norm", Kind::f64, 1, "a scalar").message();
}

// ---- CPU reference, one per kernel. Callers have passed check() first.

void execute(const KernelCall& c, const kernel::RoundBf16&, MemoryView& mem) {
  Floats v = load_floats(mem, c.reads[0]);
  for (float& x : v) x = round_bf16(x);
  store_floats(mem, c.writes[0], v);
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

void execute(const KernelCall& c, const kernel::EmbeddingForward& k, MemoryView& mem) {
  const std::vector<int32_t> tokens = load_ids(mem, c, 0, k.vocab);
  const Floats weight = load_floats(mem, c.reads[1]);
  const size_t h = static_cast<size_t>(k.hidden);
  Floats out(tokens.size() * h, std::numeric_limits<float>::quiet_NaN());
  for (size_t n = 0; n < tokens.size(); ++n) {
    if (tokens[n] < 0) continue;  // a corrupted id: the row stays NaN
    std::copy_n(weight.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(tokens[n]) * h), h,
                out.begin() + static_cast<ptrdiff_t>(n * h));
  }
  store_floats(mem, c.writes[0], out);
}

void execute(const KernelCall& c, const kernel::EmbeddingBackward& k, MemoryView& mem) {
  const std::vector<int32_t> tokens = load_ids(mem, c, 0, k.vocab);
  const Floats dout = load_floats(mem, c.reads[1]);
  const size_t h = static_cast<size_t>(k.hidden);
  Floats dweight(static_cast<size_t>(k.vocab) * h, 0.0f);
  for (size_t n = 0; n < tokens.size(); ++n) {  // token order: the one summation order
    if (tokens[n] < 0) {  // a corrupted id poisons the whole gradient
      std::fill(dweight.begin(), dweight.end(), std::numeric_limits<float>::quiet_NaN());
      break;
    }
    float* row = dweight.data() + static_cast<size_t>(tokens[n]) * h;
    const float* d = dout.data() + n * h;
    for (size_t j = 0; j < h; ++j) row[j] += d[j];
  }
  store_floats(mem, c.writes[0], dweight);
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

void execute(const KernelCall& c, const kernel::LayerNormBackward& k, MemoryView& mem) {
  const Floats dy = load_floats(mem, c.reads[0]), x = load_floats(mem, c.reads[1]);
  const Floats gamma = load_floats(mem, c.reads[2]);
  const Floats mean = load_floats(mem, c.reads[3]), rstd = load_floats(mem, c.reads[4]);
  const size_t rows = static_cast<size_t>(k.rows), h = static_cast<size_t>(k.hidden);
  const float hf = static_cast<float>(k.hidden);
  Floats dx(rows * h), dgamma(h, 0.0f), dbeta(h, 0.0f);
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
      dgamma[j] += dyr[j] * xhat;  // for each j, rows in order
      dbeta[j] += dyr[j];
    }
  }
  store_floats(mem, c.writes[0], dx);
  store_floats(mem, c.writes[1], dgamma);
  store_floats(mem, c.writes[2], dbeta);
}

namespace {
// op(X) as a row-major rows x cols matrix, from X stored rows x cols, or cols x rows when
// transposed.
Floats load_op(MemoryView& mem, const TensorRef& t, int64_t rows, int64_t cols, bool trans) {
  Floats stored = load_floats(mem, t);
  if (!trans) return stored;
  const size_t r = static_cast<size_t>(rows), cl = static_cast<size_t>(cols);
  Floats op(r * cl);
  for (size_t i = 0; i < r; ++i) {
    for (size_t j = 0; j < cl; ++j) op[i * cl + j] = stored[j * r + i];
  }
  return op;
}
}  // namespace

// The hot kernel. Operands are first laid out as row-major op(A) (M x K) and op(B) (K x N) in
// fp32 (for f32 operands without transposes, a memcpy), so the inner loop has no dtype or
// layout dispatch. For one row of C, the loop runs k outermost and j innermost: each element
// still sums its own products for k = 0..K-1 in order, starting from +0.0f, but the j loop
// vectorizes. Then C = alpha * acc (+ beta * C, reading C only when beta != 0), in fp32.
void execute(const KernelCall& c, const kernel::Gemm& k, MemoryView& mem) {
  const Floats a = load_op(mem, c.reads[0], k.m, k.k, k.trans_a);
  const Floats b = load_op(mem, c.reads[1], k.k, k.n, k.trans_b);
  const bool reads_c = k.beta != 0.0;
  const size_t m = static_cast<size_t>(k.m), n = static_cast<size_t>(k.n), kk = static_cast<size_t>(k.k);
  Floats out = reads_c ? load_floats(mem, c.reads[2]) : Floats(m * n);
  const float alpha = static_cast<float>(k.alpha), beta = static_cast<float>(k.beta);
  Floats acc(n);
  for (size_t i = 0; i < m; ++i) {
    float* accp = acc.data();
    // The sum starts from +0.0f: written as the first addition, not as a fill before it.
    if (kk == 0) std::fill(acc.begin(), acc.end(), 0.0f);
    for (size_t p = 0; p < kk; ++p) {
      const float aip = a[i * kk + p];
      const float* brow = b.data() + p * n;
      if (p == 0) {
        for (size_t j = 0; j < n; ++j) accp[j] = 0.0f + aip * brow[j];
      } else {
        for (size_t j = 0; j < n; ++j) accp[j] += aip * brow[j];
      }
    }
    float* row = out.data() + i * n;
    if (reads_c) {
      for (size_t j = 0; j < n; ++j) row[j] = alpha * accp[j] + beta * row[j];
    } else {
      for (size_t j = 0; j < n; ++j) row[j] = alpha * accp[j];
    }
  }
  store_floats(mem, c.writes[0], out);
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

void execute(const KernelCall& c, const kernel::BiasGrad& k, MemoryView& mem) {
  const Floats dy = load_floats(mem, c.reads[0]);
  const size_t rows = static_cast<size_t>(k.rows), cols = static_cast<size_t>(k.cols);
  Floats dbias(cols, 0.0f);
  for (size_t n = 0; n < rows; ++n) {  // for each column, rows in order
    for (size_t j = 0; j < cols; ++j) dbias[j] += dy[n * cols + j];
  }
  store_floats(mem, c.writes[0], dbias);
}

// y = (0.5f * x) * (1 + t), t = tanh(sqrt(2/pi) * (x + 0.044715f * ((x * x) * x))).
void execute(const KernelCall& c, const kernel::GeluForward&, MemoryView& mem) {
  Floats v = load_floats(mem, c.reads[0]);
  for (float& x : v) x = (0.5f * x) * (1.0f + gelu_tanh(x));
  store_floats(mem, c.writes[0], v);
}

// dx = dy * (0.5f * (1 + t) + (((0.5f * x) * (1 - t * t)) * s) * (1 + 3c * (x * x))), the
// derivative of the forward's product, with sech^2 written as 1 - tanh^2 (one libm call).
void execute(const KernelCall& c, const kernel::GeluBackward&, MemoryView& mem) {
  const Floats x = load_floats(mem, c.reads[0]);
  Floats dx = load_floats(mem, c.reads[1]);
  for (size_t i = 0; i < x.size(); ++i) {
    const float xi = x[i], t = gelu_tanh(xi);
    const float sech2 = 1.0f - t * t;
    const float local =
        0.5f * (1.0f + t) + (((0.5f * xi) * sech2) * kGeluScale) * (1.0f + kGeluCubic3 * (xi * xi));
    dx[i] = dx[i] * local;
  }
  store_floats(mem, c.writes[0], dx);
}

// Per row: mx = the first maximum; e = exp(l - mx); s = sum of e in vocab order; p = e / s;
// the row's loss is -log(p[target]) and dlogits = (p - onehot) * grad_scale. The loss is the
// float sum of row losses in row order, divided by N.
void execute(const KernelCall& c, const kernel::SoftmaxCrossEntropy& k, MemoryView& mem) {
  Floats d = load_floats(mem, c.reads[0]);  // logits, overwritten with dlogits
  const std::vector<int32_t> targets = load_ids(mem, c, 1, k.vocab);
  const size_t rows = static_cast<size_t>(k.rows), vocab = static_cast<size_t>(k.vocab);
  const float scale = static_cast<float>(k.grad_scale);
  float total = 0.0f;
  for (size_t n = 0; n < rows; ++n) {
    float* r = d.data() + n * vocab;
    float mx = r[0];
    for (size_t v = 1; v < vocab; ++v) mx = r[v] > mx ? r[v] : mx;
    float sum = 0.0f;
    for (size_t v = 0; v < vocab; ++v) {
      r[v] = std::exp(r[v] - mx);  // libm expf
      sum += r[v];
    }
    if (targets[n] < 0) {  // a corrupted target: this row's loss and gradient are NaN
      total += std::numeric_limits<float>::quiet_NaN();
      std::fill(r, r + vocab, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const size_t t = static_cast<size_t>(targets[n]);
    for (size_t v = 0; v < vocab; ++v) {
      const float p = r[v] / sum;
      if (v == t) total += -std::log(p);  // libm logf
      r[v] = (p - (v == t ? 1.0f : 0.0f)) * scale;
    }
  }
  const float loss = total / static_cast<float>(k.rows);
  store_floats(mem, c.writes[0], d);
  store_floats(mem, c.writes[1], std::span<const float>(&loss, 1));
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

// The sum of squares starts from 0.0 and is added to the previous acc at the end, so a chunk's
// contribution does not depend on what was accumulated before it. Squares of f32 or bf16
// values are exact in double; only the additions round.
void execute(const KernelCall& c, const kernel::SumSquares& k, MemoryView& mem) {
  const TensorRef& x = c.reads[0];
  double sum = 0.0;
  if (x.dtype == DType::f64) {
    const std::byte* p = x.numel > 0 ? mem.data(x) : nullptr;
    for (int64_t i = 0; i < x.numel; ++i) {
      const double d = load_element(p, DType::f64, i);
      sum += d * d;
    }
  } else {
    for (const float f : load_floats(mem, x)) sum += static_cast<double>(f) * static_cast<double>(f);
  }
  const double before = k.accumulate ? load_scalar(mem, c.reads[1]) : 0.0;
  store_scalar(mem, c.writes[0], before + sum);
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
