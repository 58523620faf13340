// The grid roundings and TinyLM kernels' CPU reference: forward results against double
// re-computations, backward kernels against central finite differences of a double forward,
// bf16 widening and rounding, optimizer steps against hand-computed values, argument checks,
// and determinism. Inputs are small nonzero values from the seeded Rng, so a kernel that
// ignores an operand, transposes wrongly or sums the wrong rows fails.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <vector>

#include "core/base/rng.hpp"
#include "core/base/status.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/simd.hpp"
#include "core/kernels/kernels.hpp"
#include "core/kernels/summation_order.hpp"

using namespace shardcheck::core;

namespace {

constexpr int64_t kGuard = 4;  // elements of padding on each side of every tensor
constexpr std::byte kGuardByte{0x5a};

// Each tensor gets its own buffer, padded with guard bytes on both sides, so a kernel that
// writes past a tensor's range is caught by guards_intact(), and an offset is always in play.
class Mem : public MemoryView {
 public:
  std::byte* data(const TensorRef& t) override {
    std::vector<std::byte>& b = bufs_.at(static_cast<size_t>(t.buffer)).bytes;
    if (t.offset < 0 || t.byte_offset() + t.bytes() > static_cast<int64_t>(b.size())) {
      throw std::out_of_range("tensor outside its buffer");
    }
    return b.data() + t.byte_offset();
  }
  TensorRef alloc(DType dt, int64_t n) {
    const TensorRef t{static_cast<BufferId>(bufs_.size()), kGuard, n, dt};
    const size_t guard = static_cast<size_t>(kGuard * dtype_bytes(dt));
    bufs_.push_back({std::vector<std::byte>(static_cast<size_t>(t.bytes()) + 2 * guard, kGuardByte), guard});
    std::memset(data(t), 0, static_cast<size_t>(t.bytes()));
    return t;
  }
  // A new tensor holding `values`, rounded to its dtype.
  TensorRef put(DType dt, const std::vector<double>& values) {
    const TensorRef t = alloc(dt, static_cast<int64_t>(values.size()));
    for (size_t i = 0; i < values.size(); ++i) store_element(data(t), dt, static_cast<int64_t>(i), values[i]);
    return t;
  }
  std::vector<double> get(const TensorRef& t) {
    std::vector<double> v(static_cast<size_t>(t.numel));
    for (size_t i = 0; i < v.size(); ++i) v[i] = load_element(data(t), t.dtype, static_cast<int64_t>(i));
    return v;
  }
  std::vector<std::byte> bytes(const TensorRef& t) {
    const std::byte* p = data(t);
    return std::vector<std::byte>(p, p + t.bytes());
  }
  bool guards_intact() const {
    for (const Buf& b : bufs_) {
      for (size_t j = 0; j < b.guard; ++j) {
        if (b.bytes[j] != kGuardByte || b.bytes[b.bytes.size() - 1 - j] != kGuardByte) return false;
      }
    }
    return true;
  }
  // Runs a call that must pass check_kernel and stay inside its tensors.
  void run(const KernelCall& call) {
    INFO("kernel " << call.name);
    REQUIRE(check_kernel(call).ok());
    execute_cpu(call, *this);
    REQUIRE(guards_intact());
  }

 private:
  struct Buf {
    std::vector<std::byte> bytes;
    size_t guard;
  };
  std::vector<Buf> bufs_;
};

double as_dtype(DType dt, double v) {
  return dt == DType::bf16 ? static_cast<double>(round_bf16(static_cast<float>(v)))
                           : static_cast<double>(static_cast<float>(v));
}

// n values with magnitudes in [lo, hi) and random signs, exactly representable in dt: never
// zero, so no operand can be ignored without changing a result.
std::vector<double> nonzero(Rng& rng, int64_t n, double lo, double hi, DType dt = DType::f32) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) {
    const double mag = lo + (hi - lo) * rng.uniform_real();
    x = as_dtype(dt, rng.bernoulli(0.5) ? -mag : mag);
    REQUIRE(x != 0.0);
  }
  return v;
}

std::vector<double> ids(Rng& rng, int64_t n, int64_t bound) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<double>(rng.uniform(static_cast<uint64_t>(bound)));
  return v;
}

// The worst |got - want| / (|want| + floor) must be at most rel. floor turns the check into an
// absolute one for values much smaller than it (sums that cancel, GELU's far negative tail).
void require_close(const std::vector<double>& got, const std::vector<double>& want, double rel, double floor,
                   const char* what) {
  REQUIRE(got.size() == want.size());
  double err = 0, scale = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(got[i] - want[i]) / (std::fabs(want[i]) + floor);
    if (!(e <= err)) worst = i, err = std::isnan(e) ? INFINITY : e;
    scale = std::max(scale, std::fabs(want[i]));
  }
  INFO(what << ": worst element " << worst << " is " << got[worst] << ", expected " << want[worst]
            << " (error " << err << ")");
  REQUIRE(scale > 0);  // an all-zero expectation would let a kernel that writes nothing pass
  REQUIRE(err <= rel);
}

// Central differences of a scalar function of `x` in double, one coordinate at a time.
std::vector<double> finite_diff(std::vector<double> x,
                                const std::function<double(const std::vector<double>&)>& f, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = f(x);
    x[i] = x0 - h;
    const double down = f(x);
    x[i] = x0;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

std::vector<double> to_bf16_values(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = as_dtype(DType::bf16, v[i]);
  return r;
}

// ---- Double-precision forwards the kernels are compared against.

struct LayerNormRef {
  std::vector<double> y, mean, rstd;
};
LayerNormRef layernorm_ref(const std::vector<double>& x, const std::vector<double>& gamma,
                           const std::vector<double>& beta, int64_t rows, int64_t hidden, double eps) {
  LayerNormRef r{std::vector<double>(x.size()), {}, {}};
  const size_t h = static_cast<size_t>(hidden);
  for (size_t n = 0; n < static_cast<size_t>(rows); ++n) {
    double mean = 0, var = 0;
    for (size_t j = 0; j < h; ++j) mean += x[n * h + j] / static_cast<double>(h);
    for (size_t j = 0; j < h; ++j)
      var += (x[n * h + j] - mean) * (x[n * h + j] - mean) / static_cast<double>(h);
    const double rstd = 1 / std::sqrt(var + eps);
    for (size_t j = 0; j < h; ++j) r.y[n * h + j] = (x[n * h + j] - mean) * rstd * gamma[j] + beta[j];
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
  }
  return r;
}

// op(A) op(B) with A stored K x M when trans_a, B stored N x K when trans_b.
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b,
                               const kernel::Gemm& g) {
  std::vector<double> c(static_cast<size_t>(g.m * g.n));
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const double x = g.trans_a ? a[p * g.m + i] : a[i * g.k + p];
        const double y = g.trans_b ? b[j * g.k + p] : b[p * g.n + j];
        s += x * y;
      }
      c[i * g.n + j] = s;
    }
  }
  return c;
}

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

double softmax_ce_ref(const std::vector<double>& logits, const std::vector<double>& targets, int64_t rows,
                      int64_t vocab) {
  double total = 0;
  for (int64_t n = 0; n < rows; ++n) {
    const double* r = logits.data() + n * vocab;
    double mx = r[0], sum = 0;
    for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, r[v]);
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(r[v] - mx);
    total += -(r[static_cast<int64_t>(targets[static_cast<size_t>(n)])] - mx - std::log(sum));
  }
  return total / static_cast<double>(rows);
}

}  // namespace

// ---- Grid roundings.

TEST_CASE("round_bf16 rounds to nearest even and keeps the output dtype", "[core][kernels]") {
  Mem m;
  // 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7 (ties to the even 1);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6 (ties to the even 1 + 2^-6).
  Rng rng(11);
  std::vector<double> in = {1 + 0x1p-8, 1 + 3 * 0x1p-8, -(1 + 0x1p-8 + 0x1p-20), 0x1p-130};
  for (double v : nonzero(rng, 60, 0.01, 100)) in.push_back(v);
  const TensorRef x = m.put(DType::f32, in);
  const TensorRef y32 = m.alloc(DType::f32, x.numel), y16 = m.alloc(DType::bf16, x.numel);
  m.run(kernels::round_bf16(0, x, y32));
  m.run(kernels::round_bf16(0, x, y16));
  const std::vector<double> got32 = m.get(y32), got16 = m.get(y16);
  REQUIRE(got32[0] == 1.0);
  REQUIRE(got32[1] == 1 + 0x1p-6);
  REQUIRE(got32[2] == -(1 + 0x1p-7));
  for (size_t i = 0; i < in.size(); ++i) {
    INFO("element " << i << " = " << in[i]);
    REQUIRE(got32[i] == static_cast<double>(round_bf16(static_cast<float>(in[i]))));
    REQUIRE(got16[i] == got32[i]);
  }
  // A bf16 input is already on the grid: rounding again changes nothing.
  const TensorRef z = m.alloc(DType::f32, x.numel);
  m.run(kernels::round_bf16(0, y16, z));
  REQUIRE(m.get(z) == got32);
}

TEST_CASE("round_to_grid's rounding is nearbyint's, bit for bit", "[core][kernels]") {
  // Ties on both sides of zero, signed zeros, the edges of 2^52 and 2^53, infinities and NaN,
  // then random magnitudes over every binade from 2^-30 to 2^60.
  std::vector<double> u = {0.0,
                           -0.0,
                           0.5,
                           -0.5,
                           1.5,
                           -1.5,
                           2.5,
                           -2.5,
                           0.49999999999999994,
                           -0.49999999999999994,
                           0x1p52 - 0.5,
                           -(0x1p52 - 0.5),
                           0x1p52 - 1.5,
                           0x1p52,
                           0x1p52 + 1,
                           0x1p53 + 2,
                           4503599627370495.5,
                           1e300,
                           -1e300,
                           INFINITY,
                           -INFINITY,
                           NAN,
                           -NAN,
                           5e-324};
  Rng rng(3);
  for (int i = 0; i < 20000; ++i) {
    const double mag = std::ldexp(rng.uniform_real(), static_cast<int>(rng.uniform_int(-30, 60)));
    u.push_back(rng.bernoulli(0.5) ? -mag : mag);
    u.push_back(std::floor(mag) + 0.5);  // a tie
  }
  for (const double v : u) {
    CAPTURE(v);
    const double want = std::nearbyint(v), got = cpu::round_half_even(v);
    REQUIRE(std::memcmp(&want, &got, sizeof got) == 0);
  }
}

TEST_CASE("round_to_grid lands on exact multiples of q with ties to even and clamping", "[core][kernels]") {
  Mem m;
  const double q = 3 * 0x1p-10;  // dp = 3: not a power of two
  const double limit = 100;
  std::vector<double> in = {2.5 * q, 3.5 * q, -2.5 * q, 0.5 * q, 1000 * q, -INFINITY, NAN, 99.5 * q};
  Rng rng(12);
  for (double v : nonzero(rng, 200, 1e-4, 0.4)) in.push_back(v);  // some beyond 100 q
  const TensorRef x = m.put(DType::f32, in), y = m.alloc(DType::f32, x.numel);
  m.run(kernels::round_to_grid(0, x, y, q, limit));
  const std::vector<double> got = m.get(y);
  REQUIRE(got[0] == 2 * q);  // ties to even
  REQUIRE(got[1] == 4 * q);
  REQUIRE(got[2] == -2 * q);
  REQUIRE(got[3] == 0.0);
  REQUIRE(got[4] == limit * q);  // clamped
  REQUIRE(got[5] == -limit * q);
  REQUIRE(std::isnan(got[6]));
  REQUIRE(got[7] == 100 * q);  // 99.5 ties to the even 100, which is still inside the limit
  bool some_clamped = false, some_inside = false;
  for (size_t i = 8; i < in.size(); ++i) {
    INFO("element " << i << " = " << in[i] << " -> " << got[i]);
    const double units = got[i] / q;
    REQUIRE(units == std::nearbyint(units));  // an exact multiple of q
    REQUIRE(std::fabs(units) <= limit);
    if (std::fabs(in[i] / q) > limit) {
      some_clamped = true;
    } else {
      some_inside = true;
      REQUIRE(std::fabs(got[i] - in[i]) <= q / 2);
    }
  }
  REQUIRE(some_clamped);
  REQUIRE(some_inside);
  // The point of the grid: sums of grid values are exact in fp32, so any order agrees.
  float forward = 0, backward = 0;
  for (size_t i = 8; i < got.size(); ++i) forward += static_cast<float>(got[i]);
  for (size_t i = got.size(); i-- > 8;) backward += static_cast<float>(got[i]);
  REQUIRE(forward == backward);
}

// ---- Embedding.

TEST_CASE("embedding_forward gathers weight rows by token in f32 and bf16", "[core][kernels]") {
  const int64_t vocab = 5, hidden = 3, n = 7;
  Rng rng(21);
  const std::vector<double> tok = ids(rng, n, vocab);
  for (DType wt : {DType::f32, DType::bf16}) {
    Mem m;
    const std::vector<double> w = nonzero(rng, vocab * hidden, 0.1, 2, wt);
    const TensorRef tokens = m.put(DType::i32, tok), weight = m.put(wt, w);
    const TensorRef out32 = m.alloc(DType::f32, n * hidden), out16 = m.alloc(DType::bf16, n * hidden);
    m.run(kernels::embedding_forward(0, tokens, weight, out32, vocab, hidden));
    m.run(kernels::embedding_forward(0, tokens, weight, out16, vocab, hidden));
    const std::vector<double> got32 = m.get(out32), got16 = m.get(out16);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < hidden; ++j) {
        const double want = w[static_cast<size_t>(tok[i] * hidden + j)];
        REQUIRE(got32[i * hidden + j] == want);
        REQUIRE(got16[i * hidden + j] == as_dtype(DType::bf16, want));
      }
    }
  }
}

TEST_CASE("embedding_backward sums repeated tokens and matches finite differences", "[core][kernels]") {
  const int64_t vocab = 6, hidden = 4, n = 13;
  Rng rng(22);
  std::vector<double> tok = ids(rng, n, vocab - 1);  // the last row gets no token: its gradient is 0
  tok[3] = tok[7] = tok[11] = 2;                     // and row 2 several
  const std::vector<double> w = nonzero(rng, vocab * hidden, 0.1, 1), r = nonzero(rng, n * hidden, 0.1, 1);
  Mem m;
  const TensorRef tokens = m.put(DType::i32, tok), dout = m.put(DType::f32, r);
  const TensorRef dw = m.put(DType::f32, nonzero(rng, vocab * hidden, 1, 2));  // overwritten, not added to
  m.run(kernels::embedding_backward(0, tokens, dout, dw, vocab, hidden));
  // L(W) = sum over n, j of r[n][j] * W[tokens[n]][j].
  auto loss = [&](const std::vector<double>& wt) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < hidden; ++j)
        s += r[i * hidden + j] * wt[static_cast<size_t>(tok[i] * hidden + j)];
    }
    return s;
  };
  const std::vector<double> got = m.get(dw);
  require_close(got, finite_diff(w, loss), 1e-5, 1e-3, "dweight");
  for (int64_t j = 0; j < hidden; ++j) REQUIRE(got[(vocab - 1) * hidden + j] == 0.0);
  // bf16 dweight: accumulated in fp32 and rounded once at the end, not per addition.
  const TensorRef dw16 = m.alloc(DType::bf16, vocab * hidden);
  m.run(kernels::embedding_backward(0, tokens, dout, dw16, vocab, hidden));
  REQUIRE(m.get(dw16) == to_bf16_values(got));
}

TEST_CASE("embedding kernels turn corrupted token ids into NaN, never out-of-bounds reads",
          "[core][kernels]") {
  // Corrupted ids come from races on the token buffer; the checker reports those, so the
  // kernel must not crash: the row becomes NaN and so does the weight gradient.
  const int64_t vocab = 4, hidden = 2;
  for (double bad : {-1.0, 4.0}) {
    Mem m;
    const TensorRef tokens = m.put(DType::i32, {0, 3, bad}),
                    weight = m.put(DType::f32, {1, 2, 3, 4, 5, 6, 7, 8});
    const TensorRef out = m.alloc(DType::f32, 3 * hidden), dw = m.alloc(DType::f32, vocab * hidden);
    REQUIRE(check_kernel(kernels::embedding_forward(0, tokens, weight, out, vocab, hidden)).ok());
    m.run(kernels::embedding_forward(0, tokens, weight, out, vocab, hidden));
    const std::vector<double> y = m.get(out);
    REQUIRE(y[0] == 1.0);
    REQUIRE(y[2] == 7.0);
    REQUIRE(std::isnan(y[4]));
    REQUIRE(std::isnan(y[5]));
    m.run(kernels::embedding_backward(0, tokens, out, dw, vocab, hidden));
    for (double g : m.get(dw)) REQUIRE(std::isnan(g));
    REQUIRE(m.guards_intact());
  }
}

// ---- LayerNorm.

TEST_CASE("layernorm_forward matches a double-precision layer norm", "[core][kernels]") {
  const int64_t rows = 5, hidden = 7;
  const double eps = 1e-5;
  Rng rng(31);
  std::vector<double> x = nonzero(rng, rows * hidden, 0.1, 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = as_dtype(DType::f32, x[i] + static_cast<double>(i / hidden));
  const std::vector<double> gamma = nonzero(rng, hidden, 0.5, 1.5), beta = nonzero(rng, hidden, 0.1, 1);
  Mem m;
  const TensorRef tx = m.put(DType::f32, x), tg = m.put(DType::f32, gamma), tb = m.put(DType::f32, beta);
  const TensorRef y = m.alloc(DType::f32, rows * hidden), mean = m.alloc(DType::f32, rows);
  const TensorRef rstd = m.alloc(DType::f32, rows);
  m.run(kernels::layernorm_forward(0, tx, tg, tb, y, mean, rstd, rows, hidden, eps));
  const LayerNormRef want = layernorm_ref(x, gamma, beta, rows, hidden, eps);
  require_close(m.get(y), want.y, 1e-5, 1e-2, "y");
  require_close(m.get(mean), want.mean, 1e-5, 1e-3, "mean");
  require_close(m.get(rstd), want.rstd, 1e-5, 1e-3, "rstd");
}

TEST_CASE("layernorm_backward matches finite differences of the forward", "[core][kernels]") {
  const int64_t rows = 4, hidden = 6;
  const double eps = 1e-5;
  Rng rng(32);
  const std::vector<double> x = nonzero(rng, rows * hidden, 0.1, 2), gamma = nonzero(rng, hidden, 0.5, 1.5);
  const std::vector<double> beta = nonzero(rng, hidden, 0.1, 1), dy = nonzero(rng, rows * hidden, 0.1, 1);
  Mem m;
  const TensorRef tx = m.put(DType::f32, x), tg = m.put(DType::f32, gamma), tb = m.put(DType::f32, beta);
  const TensorRef tdy = m.put(DType::f32, dy), y = m.alloc(DType::f32, rows * hidden);
  const TensorRef mean = m.alloc(DType::f32, rows), rstd = m.alloc(DType::f32, rows);
  const TensorRef dx = m.alloc(DType::f32, rows * hidden);
  const TensorRef dgamma = m.put(DType::f32, nonzero(rng, hidden, 1, 2)), dbeta = m.alloc(DType::f32, hidden);
  m.run(kernels::layernorm_forward(0, tx, tg, tb, y, mean, rstd, rows, hidden, eps));
  m.run(kernels::layernorm_backward(0, tdy, tx, tg, mean, rstd, dx, dgamma, dbeta, rows, hidden));
  // L = sum of dy * y, so dL/dy = dy.
  auto by_x = [&](const std::vector<double>& v) {
    return dot(dy, layernorm_ref(v, gamma, beta, rows, hidden, eps).y);
  };
  auto by_gamma = [&](const std::vector<double>& v) {
    return dot(dy, layernorm_ref(x, v, beta, rows, hidden, eps).y);
  };
  auto by_beta = [&](const std::vector<double>& v) {
    return dot(dy, layernorm_ref(x, gamma, v, rows, hidden, eps).y);
  };
  require_close(m.get(dx), finite_diff(x, by_x), 1e-4, 1e-2, "dx");
  require_close(m.get(dgamma), finite_diff(gamma, by_gamma), 1e-4, 1e-2, "dgamma");
  require_close(m.get(dbeta), finite_diff(beta, by_beta), 1e-4, 1e-2, "dbeta");
}

TEST_CASE("layernorm with bf16 operands widens them and rounds y once", "[core][kernels]") {
  const int64_t rows = 3, hidden = 8;
  Rng rng(33);
  const std::vector<double> x = nonzero(rng, rows * hidden, 0.1, 2, DType::bf16);
  const std::vector<double> gamma = nonzero(rng, hidden, 0.5, 1.5, DType::bf16);
  const std::vector<double> beta = nonzero(rng, hidden, 0.1, 1, DType::bf16);
  Mem m;
  auto run = [&](DType in, DType out) {
    const TensorRef y = m.alloc(out, rows * hidden), mean = m.alloc(DType::f32, rows);
    const TensorRef rstd = m.alloc(DType::f32, rows);
    m.run(kernels::layernorm_forward(0, m.put(in, x), m.put(in, gamma), m.put(in, beta), y, mean, rstd, rows,
                                     hidden));
    return m.get(y);
  };
  const std::vector<double> y32 = run(DType::f32, DType::f32);
  REQUIRE(run(DType::bf16, DType::f32) == y32);
  REQUIRE(run(DType::bf16, DType::bf16) == to_bf16_values(y32));
}

// ---- GEMM.

TEST_CASE("gemm matches a double product for every transpose combination", "[core][kernels]") {
  const int64_t M = 5, N = 7, K = 9;
  Rng rng(41);
  const std::vector<double> a = nonzero(rng, M * K, 0.1, 1), b = nonzero(rng, K * N, 0.1, 1);
  const std::vector<double> c0 = nonzero(rng, M * N, 0.1, 1);
  for (int variant = 0; variant < 8; ++variant) {
    kernel::Gemm g{M, N, K, (variant & 1) != 0, (variant & 2) != 0, 0.75, (variant & 4) ? -0.5 : 0.0};
    INFO("trans_a " << g.trans_a << " trans_b " << g.trans_b << " beta " << g.beta);
    Mem m;
    const TensorRef ta = m.put(DType::f32, a), tb = m.put(DType::f32, b);
    // With beta == 0, C's old contents must not be read: NaN there would poison the result.
    const TensorRef tc =
        g.beta != 0 ? m.put(DType::f32, c0) : m.put(DType::f32, std::vector<double>(c0.size(), NAN));
    const KernelCall call = kernels::gemm(0, ta, tb, tc, g);
    REQUIRE(call.reads.size() == (g.beta != 0 ? 3u : 2u));
    m.run(call);
    // The same values read through the stored layouts: A as K x M when transposed.
    std::vector<double> want = matmul_ref(a, b, g);
    for (size_t i = 0; i < want.size(); ++i) want[i] = g.alpha * want[i] + g.beta * c0[i];
    require_close(m.get(tc), want, 1e-5, 0.1, "C");
  }
}

TEST_CASE("gemm accumulates over k in order in fp32 then applies alpha and beta", "[core][kernels]") {
  // N = 6 takes the general loop only; 16 one block of sixteen columns held in registers; 40
  // two blocks and the general loop for the rest; M = 5 ends on a row without a partner. Every
  // path (and the wider build a processor with AVX2 runs) must give each element the same bits.
  for (const int64_t N : {int64_t{6}, int64_t{16}, int64_t{40}}) {
    for (const int64_t M : {int64_t{4}, int64_t{5}}) {
      CAPTURE(N, M);
      const int64_t K = 33;
      Rng rng(42);
      // Magnitudes spread over six binades, so the summation order shows in the low bits.
      std::vector<double> a = nonzero(rng, M * K, 0.01, 1), b = nonzero(rng, K * N, 0.1, 1);
      for (size_t i = 0; i < a.size(); i += 3) a[i] *= 64;
      const std::vector<double> c0 = nonzero(rng, M * N, 0.1, 1);
      const kernel::Gemm g{M, N, K, true, false, 0.3, 0.7};  // A stored K x M
      Mem m;
      const TensorRef tc = m.put(DType::f32, c0);
      m.run(kernels::gemm(0, m.put(DType::f32, a), m.put(DType::f32, b), tc, g));
      const std::vector<double> got = m.get(tc);
      bool order_matters = false;
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          float acc = 0.0f, reversed = 0.0f;
          for (int64_t p = 0; p < K; ++p)
            acc += static_cast<float>(a[p * M + i]) * static_cast<float>(b[p * N + j]);
          for (int64_t p = K; p-- > 0;)
            reversed += static_cast<float>(a[p * M + i]) * static_cast<float>(b[p * N + j]);
          const float want = 0.3f * acc + 0.7f * static_cast<float>(c0[i * N + j]);
          REQUIRE(got[i * N + j] == static_cast<double>(want));
          order_matters |= acc != reversed;
        }
      }
      REQUIRE(order_matters);  // otherwise this test could not tell the orders apart
    }
  }
}

TEST_CASE("gemm's product loop gives the same bits for every instruction set", "[core][kernels]") {
  // Each build of the loop (baseline SSE2; AVX2 and AVX-512F where this processor has them) against the
  // in-order scalar sum, for row counts that fill each row block (eight, four, two, one) and
  // leave remainders, column blocks and tails of every kind, with and
  // without C as an input.
  Rng rng(7);
  int ran = 0;
  for (const cpu::GemmPath& path : cpu::gemm_paths()) {
    if (!path.available) continue;
    ++ran;
    for (const size_t M :
         {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{7}, size_t{8}, size_t{13}, size_t{19}}) {
      for (const size_t N : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{48}, size_t{71}}) {
        for (const size_t K : {size_t{0}, size_t{1}, size_t{2}, size_t{29}}) {
          for (const bool reads_c : {false, true}) {
            CAPTURE(path.name, M, N, K, reads_c);
            std::vector<float> a(M * K), b(K * N), c0(M * N), acc(N);
            auto draw = [&rng] { return static_cast<float>(2 * rng.uniform_real() - 1); };
            for (float& v : a) v = draw() * (rng.bernoulli(0.3) ? 64.0f : 1.0f);
            for (float& v : b) v = draw();
            for (float& v : c0) v = draw();
            std::vector<float> out = c0;
            path.run(a.data(), b.data(), out.data(), M, N, K, 0.3f, reads_c ? 0.7f : 0.0f, reads_c,
                     acc.data());
            for (size_t i = 0; i < M; ++i) {
              for (size_t j = 0; j < N; ++j) {
                float sum = 0.0f;
                for (size_t p = 0; p < K; ++p)
                  sum = p == 0 ? 0.0f + a[i * K] * b[j] : sum + a[i * K + p] * b[p * N + j];
                const float want = reads_c ? 0.3f * sum + 0.7f * c0[i * N + j] : 0.3f * sum;
                REQUIRE(std::memcmp(&out[i * N + j], &want, sizeof want) == 0);
              }
            }
          }
        }
      }
    }
  }
  CHECK(ran >= 1);
}

TEST_CASE("gemm computes a linear layer's input and weight gradients", "[core][kernels]") {
  // y = x W^T with x N x I and W O x I; L = sum of r * y, so dy = r, dW = dy^T x, dx = dy W.
  const int64_t N = 6, I = 5, O = 4;
  Rng rng(43);
  const std::vector<double> x = nonzero(rng, N * I, 0.1, 1), w = nonzero(rng, O * I, 0.1, 1);
  const std::vector<double> r = nonzero(rng, N * O, 0.1, 1);
  Mem m;
  const TensorRef tx = m.put(DType::f32, x), tw = m.put(DType::f32, w), tr = m.put(DType::f32, r);
  const TensorRef y = m.alloc(DType::f32, N * O), dw = m.alloc(DType::f32, O * I),
                  dx = m.alloc(DType::f32, N * I);
  m.run(kernels::gemm(0, tx, tw, y, {N, O, I, false, true}));
  m.run(kernels::gemm(0, tr, tx, dw, {O, I, N, true, false}));
  m.run(kernels::gemm(0, tr, tw, dx, {N, I, O, false, false}));
  auto forward = [&](const std::vector<double>& xv, const std::vector<double>& wv) {
    return matmul_ref(xv, wv, {N, O, I, false, true});
  };
  require_close(m.get(y), forward(x, w), 1e-5, 0.1, "y");
  const std::vector<double> dw_fd =
      finite_diff(w, [&](const std::vector<double>& v) { return dot(r, forward(x, v)); });
  const std::vector<double> dx_fd =
      finite_diff(x, [&](const std::vector<double>& v) { return dot(r, forward(v, w)); });
  require_close(m.get(dw), dw_fd, 1e-5, 0.1, "dW");
  require_close(m.get(dx), dx_fd, 1e-5, 0.1, "dx");
  // Gradient accumulation: beta = 1 adds this microbatch's dW to the previous one.
  const std::vector<double> once = m.get(dw);
  m.run(kernels::gemm(0, tr, tx, dw, {O, I, N, true, false, 1.0, 1.0}));
  const std::vector<double> twice = m.get(dw);
  for (size_t i = 0; i < once.size(); ++i) REQUIRE(twice[i] == 2 * once[i]);
}

TEST_CASE("gemm with bf16 operands widens them and rounds C once", "[core][kernels]") {
  const int64_t M = 3, N = 5, K = 17;
  Rng rng(44);
  const std::vector<double> a = nonzero(rng, M * K, 0.1, 1, DType::bf16);
  const std::vector<double> b = nonzero(rng, N * K, 0.1, 1, DType::bf16);
  const kernel::Gemm g{M, N, K, false, true};
  Mem m;
  auto run = [&](DType in, DType out) {
    const TensorRef c = m.alloc(out, M * N);
    m.run(kernels::gemm(0, m.put(in, a), m.put(in, b), c, g));
    return m.get(c);
  };
  const std::vector<double> c32 = run(DType::f32, DType::f32);
  REQUIRE(run(DType::bf16, DType::f32) == c32);
  REQUIRE(run(DType::bf16, DType::bf16) == to_bf16_values(c32));
  REQUIRE(to_bf16_values(c32) != c32);  // the rounding is visible, so the check above means something
}

// ---- Bias and GELU.

// ---- The one summation order (core/kernels/summation_order.hpp), which the GPU kernels follow.

namespace {

// 1.0, then 63 zeros, then 64 values of 2^-24 (half an ulp of 1.0). In row order each 2^-24
// added to 1.0 is a tie that rounds back to 1.0; in 64-row chunks the second chunk sums them
// exactly to 2^-18 first, and 1.0 + 2^-18 is representable.
std::vector<float> order_sensitive_column() {
  std::vector<float> v(2 * static_cast<size_t>(kSumChunkRows), 0.0f);
  v[0] = 1.0f;
  for (size_t n = static_cast<size_t>(kSumChunkRows); n < v.size(); ++n) v[n] = std::ldexp(1.0f, -24);
  return v;
}

float row_order_sum(const std::vector<float>& v) {
  float s = 0.0f;
  for (const float x : v) s += x;
  return s;
}

}  // namespace

TEST_CASE("chunked_sum adds 64-row chunks in order, then the chunk sums in order", "[core][kernels]") {
  REQUIRE(kSumChunkRows == 64);
  const std::vector<float> v = order_sensitive_column();
  CHECK(chunked_sum(v) == 1.0f + std::ldexp(1.0f, -18));
  CHECK(row_order_sum(v) == 1.0f);  // the order matters for this column: the test is not vacuous
  // Hand-computed on three uneven chunks (64 + 64 + 2 rows): ((1) + (2^-25 + 2^-25)) + (2^-24 +
  // 2^-24) = (1 + 2^-24, a tie that rounds to 1) + 2^-23. Row order gets 1: every addend is at
  // most half an ulp of 1.
  std::vector<float> w(130, 0.0f);
  w[0] = 1.0f;
  w[64] = w[65] = std::ldexp(1.0f, -25);
  w[128] = w[129] = std::ldexp(1.0f, -24);
  CHECK(chunked_sum(w) == 1.0f + std::ldexp(1.0f, -23));
  CHECK(row_order_sum(w) == 1.0f);
  // At most one chunk: exactly the row order.
  Rng rng(61);
  std::vector<float> short_column;
  for (const double x : nonzero(rng, kSumChunkRows, 0.1, 1)) short_column.push_back(static_cast<float>(x));
  CHECK(chunked_sum(short_column) == row_order_sum(short_column));
}

TEST_CASE("ChunkedColumnSum sums each column like chunked_sum, for any row count", "[core][kernels]") {
  Rng rng(62);
  for (const int64_t rows : {0, 1, 63, 64, 65, 128, 200}) {
    const int64_t cols = 5;
    const std::vector<double> m = rows > 0 ? nonzero(rng, rows * cols, 0.1, 1) : std::vector<double>{};
    ChunkedColumnSum sums(static_cast<size_t>(cols));
    for (int64_t n = 0; n < rows; ++n) {
      for (int64_t j = 0; j < cols; ++j)
        sums.add(static_cast<size_t>(j), static_cast<float>(m[n * cols + j]));
      sums.end_row();
    }
    const std::vector<float> got = sums.finish();
    for (int64_t j = 0; j < cols; ++j) {
      std::vector<float> column;
      for (int64_t n = 0; n < rows; ++n) column.push_back(static_cast<float>(m[n * cols + j]));
      INFO("rows " << rows << ", column " << j);
      CHECK(got[static_cast<size_t>(j)] == chunked_sum(column));
    }
  }
}

TEST_CASE("fixed_tree_sum is the GPU's two-level tree, a function of the length alone", "[core][kernels]") {
  REQUIRE(fixed_tree_blocks(0) == 0);
  REQUIRE(fixed_tree_blocks(4096) == 1);
  REQUIRE(fixed_tree_blocks(4097) == 2);
  REQUIRE(fixed_tree_blocks(int64_t{1} << 30) == kTreeBlocksMax);  // then the lanes stride
  // The tree spelled out, for lengths on both sides of each boundary (one block, several, lanes
  // that take more than one term).
  for (const int64_t n :
       {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{4096}, int64_t{4097}, int64_t{70000}}) {
    Rng rng(63);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = rng.uniform_real() * 10.0;
    const int64_t blocks = fixed_tree_blocks(n), lanes = blocks * kTreeBlock;
    std::vector<double> lane(static_cast<size_t>(lanes), 0.0), fin(static_cast<size_t>(kTreeBlock), 0.0);
    for (int64_t i = 0; i < n; ++i) lane[static_cast<size_t>(i % lanes)] += v[static_cast<size_t>(i)];
    auto tree = [](double* p) {
      for (int64_t s = kTreeBlock / 2; s > 0; s /= 2) {
        for (int64_t t = 0; t < s; ++t) p[t] += p[t + s];
      }
      return p[0];
    };
    for (int64_t b = 0; b < blocks; ++b)
      fin[static_cast<size_t>(b % kTreeBlock)] += tree(&lane[static_cast<size_t>(b * kTreeBlock)]);
    INFO("n " << n);
    CHECK(fixed_tree_sum(n, [&](int64_t i) { return v[static_cast<size_t>(i)]; }) == tree(fin.data()));
  }
  // And it is not left to right: 1.0 in lane 0, half an ulp of 1.0 in lanes 1 and 129. The tree
  // adds the halves first (stride 128), exactly, then 2^-52 to 1.0.
  std::vector<double> w(130, 0.0);
  w[0] = 1.0;
  w[1] = w[129] = std::ldexp(1.0, -53);
  double left_to_right = 0;
  for (const double x : w) left_to_right += x;
  CHECK(left_to_right == 1.0);  // each half ulp is a tie that rounds back to 1.0
  CHECK(fixed_tree_sum(130, [&](int64_t i) { return w[static_cast<size_t>(i)]; }) ==
        1.0 + std::ldexp(1.0, -52));
}

TEST_CASE("bias_grad, layernorm_backward and embedding_backward sum in the chunked order",
          "[core][kernels]") {
  const std::vector<float> col = order_sensitive_column();
  const int64_t rows = static_cast<int64_t>(col.size());
  const float want = chunked_sum(col);
  REQUIRE(want != row_order_sum(col));
  std::vector<double> dy(col.begin(), col.end());
  Mem m;
  SECTION("bias_grad") {
    const TensorRef dbias = m.alloc(DType::f32, 1);
    m.run(kernels::bias_grad(0, m.put(DType::f32, dy), dbias, rows, 1));
    CHECK(m.get(dbias)[0] == want);
  }
  SECTION("layernorm_backward: dbeta is the sum of dy, dgamma of dy * xhat") {
    // hidden 2, x = (+1, -1) per row: mean 0, rstd 1 (eps 0 in the stored rstd), xhat = (+1, -1).
    std::vector<double> dy2, x2;
    for (const float d : col) dy2.insert(dy2.end(), {d, d}), x2.insert(x2.end(), {1.0, -1.0});
    const TensorRef dx = m.alloc(DType::f32, rows * 2), dgamma = m.alloc(DType::f32, 2),
                    dbeta = m.alloc(DType::f32, 2);
    m.run(kernels::layernorm_backward(
        0, m.put(DType::f32, dy2), m.put(DType::f32, x2), m.put(DType::f32, {1.0, 1.0}),
        m.put(DType::f32, std::vector<double>(rows, 0.0)), m.put(DType::f32, std::vector<double>(rows, 1.0)),
        dx, dgamma, dbeta, rows, 2));
    CHECK(m.get(dbeta) == std::vector<double>{want, want});
    CHECK(m.get(dgamma) == std::vector<double>{want, -want});
  }
  SECTION("embedding_backward: every token the same row") {
    const TensorRef dw = m.alloc(DType::f32, 2);
    m.run(kernels::embedding_backward(0, m.put(DType::i32, std::vector<double>(rows, 1.0)),
                                      m.put(DType::f32, dy), dw, 2, 1));
    CHECK(m.get(dw) == std::vector<double>{0.0, want});
  }
}

TEST_CASE("bias_add broadcasts over rows and bias_grad matches finite differences", "[core][kernels]") {
  const int64_t rows = 5, cols = 3;
  Rng rng(51);
  const std::vector<double> x = nonzero(rng, rows * cols, 0.1, 1), bias = nonzero(rng, cols, 0.1, 1);
  const std::vector<double> dy = nonzero(rng, rows * cols, 0.1, 1);
  Mem m;
  const TensorRef tx = m.put(DType::f32, x), tb = m.put(DType::f32, bias),
                  y = m.alloc(DType::f32, rows * cols);
  const TensorRef dbias = m.put(DType::f32, nonzero(rng, cols, 1, 2));
  m.run(kernels::bias_add(0, tx, tb, y, rows, cols));
  m.run(kernels::bias_grad(0, m.put(DType::f32, dy), dbias, rows, cols));
  auto forward = [&](const std::vector<double>& b) {
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] + b[i % static_cast<size_t>(cols)];
    return out;
  };
  require_close(m.get(y), forward(bias), 1e-6, 0.1, "y");
  const auto loss = [&](const std::vector<double>& b) { return dot(dy, forward(b)); };
  require_close(m.get(dbias), finite_diff(bias, loss), 1e-5, 0.1, "dbias");
}

TEST_CASE("gelu_forward matches the tanh formula in double", "[core][kernels]") {
  Rng rng(52);
  const std::vector<double> x = nonzero(rng, 200, 0.01, 5);
  Mem m;
  const TensorRef tx = m.put(DType::f32, x), y = m.alloc(DType::f32, tx.numel);
  m.run(kernels::gelu_forward(0, tx, y));
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = gelu_ref(x[i]);
  // Far left, y = 0.5 x (1 + tanh) cancels in fp32: relative 1e-5 above 0.1, absolute 1e-6 below.
  require_close(m.get(y), want, 1e-5, 0.1, "y");
}

TEST_CASE("bias_gelu is bias_add then gelu_forward, bit for bit", "[core][kernels]") {
  const int64_t rows = 7, cols = 5;
  for (const DType act : {DType::f32, DType::bf16}) {
    for (const bool in_place : {false, true}) {
      INFO(to_string(act) << (in_place ? " in place" : ""));
      Rng rng(54);
      const std::vector<double> x = nonzero(rng, rows * cols, 0.01, 3, act),
                                bias = nonzero(rng, cols, 0.01, 1);
      Mem fused, apart;
      auto run = [&](Mem& m, bool one_kernel) {
        const TensorRef tx = m.put(act, x), tb = m.put(DType::f32, bias);
        const TensorRef pre = in_place ? tx : m.alloc(act, rows * cols), y = m.alloc(act, rows * cols);
        if (one_kernel) {
          m.run(kernels::bias_gelu(0, tx, tb, pre, y, rows, cols));
        } else {
          m.run(kernels::bias_add(0, tx, tb, pre, rows, cols));
          m.run(kernels::gelu_forward(0, pre, y));
        }
        return std::pair{m.bytes(pre), m.bytes(y)};
      };
      const auto [pre1, y1] = run(fused, true);
      const auto [pre2, y2] = run(apart, false);
      CHECK(pre1 == pre2);
      CHECK(y1 == y2);
    }
  }
}

TEST_CASE("the round_bf16 flags round column sums as a round_bf16 after them would", "[core][kernels]") {
  // 130 rows: three chunks. Random fp32 terms make sums that bf16 cannot hold, so the flag
  // must change them.
  const int64_t rows = 130, cols = 6;
  Rng rng(55);
  const std::vector<double> dy = nonzero(rng, rows * cols, 0.01, 2), x = nonzero(rng, rows * cols, 0.01, 2);
  std::vector<double> tokens(static_cast<size_t>(rows));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<double>(i % 4);
  // Runs the kernel that `make` builds (with the flag or without), then, without it, a
  // round_bf16 of each gradient; returns the gradients' bytes.
  auto grads = [&](auto make, bool flag, int outputs) {
    Mem m;
    const std::vector<TensorRef> out = make(m, flag);
    std::vector<std::vector<std::byte>> bytes;
    for (int i = 0; i < outputs; ++i) {
      if (!flag) m.run(kernels::round_bf16(0, out[static_cast<size_t>(i)], out[static_cast<size_t>(i)]));
      bytes.push_back(m.bytes(out[static_cast<size_t>(i)]));
    }
    return bytes;
  };
  auto unrounded = [&](auto make, int outputs) {
    Mem m;
    const std::vector<TensorRef> out = make(m, false);
    std::vector<std::vector<std::byte>> bytes;
    for (int i = 0; i < outputs; ++i) bytes.push_back(m.bytes(out[static_cast<size_t>(i)]));
    return bytes;
  };
  auto bias = [&](Mem& m, bool flag) {
    const TensorRef dbias = m.alloc(DType::f32, cols);
    m.run(kernels::bias_grad(0, m.put(DType::f32, dy), dbias, rows, cols, flag));
    return std::vector<TensorRef>{dbias};
  };
  auto layernorm = [&](Mem& m, bool flag) {
    const TensorRef dgamma = m.alloc(DType::f32, cols), dbeta = m.alloc(DType::f32, cols);
    m.run(kernels::layernorm_backward(
        0, m.put(DType::f32, dy), m.put(DType::f32, x), m.put(DType::f32, std::vector<double>(cols, 0.75)),
        m.put(DType::f32, std::vector<double>(rows, 0.1)), m.put(DType::f32, std::vector<double>(rows, 1.3)),
        m.alloc(DType::f32, rows * cols), dgamma, dbeta, rows, cols, flag));
    return std::vector<TensorRef>{dgamma, dbeta};
  };
  auto embedding = [&](Mem& m, bool flag) {
    const TensorRef dw = m.alloc(DType::f32, 4 * cols);
    m.run(
        kernels::embedding_backward(0, m.put(DType::i32, tokens), m.put(DType::f32, dy), dw, 4, cols, flag));
    return std::vector<TensorRef>{dw};
  };
  SECTION("bias_grad") {
    CHECK(grads(bias, true, 1) == grads(bias, false, 1));
    CHECK(grads(bias, true, 1) != unrounded(bias, 1));
  }
  SECTION("layernorm_backward: dgamma and dbeta") {
    CHECK(grads(layernorm, true, 2) == grads(layernorm, false, 2));
    CHECK(grads(layernorm, true, 2) != unrounded(layernorm, 2));
  }
  SECTION("embedding_backward") {
    CHECK(grads(embedding, true, 1) == grads(embedding, false, 1));
    CHECK(grads(embedding, true, 1) != unrounded(embedding, 1));
  }
}

TEST_CASE("gelu_backward matches finite differences of gelu", "[core][kernels]") {
  Rng rng(53);
  const std::vector<double> x = nonzero(rng, 200, 0.01, 5), dy = nonzero(rng, 200, 0.1, 1);
  Mem m;
  const TensorRef tx = m.put(DType::f32, x), tdy = m.put(DType::f32, dy), dx = m.alloc(DType::f32, tx.numel);
  m.run(kernels::gelu_backward(0, tx, tdy, dx));
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    want[i] = dy[i] * finite_diff({x[i]}, [](const std::vector<double>& v) { return gelu_ref(v[0]); })[0];
  }
  require_close(m.get(dx), want, 1e-5, 0.1, "dx");
}

// ---- Softmax cross-entropy.

TEST_CASE("softmax_cross_entropy loss and dlogits match double and finite differences", "[core][kernels]") {
  const int64_t rows = 4, vocab = 7;
  Rng rng(61);
  const std::vector<double> logits = nonzero(rng, rows * vocab, 0.1, 3), targets = ids(rng, rows, vocab);
  Mem m;
  const TensorRef tl = m.put(DType::f32, logits), tt = m.put(DType::i32, targets);
  const TensorRef dl = m.alloc(DType::f32, rows * vocab), loss = m.alloc(DType::f32, 1);
  // grad_scale = 1/N makes dlogits the gradient of the mean loss.
  m.run(kernels::softmax_cross_entropy(0, tl, tt, dl, loss, rows, vocab, 1.0 / rows));
  const auto mean_loss = [&](const std::vector<double>& v) {
    return softmax_ce_ref(v, targets, rows, vocab);
  };
  require_close(m.get(loss), {mean_loss(logits)}, 1e-5, 0, "loss");
  require_close(m.get(dl), finite_diff(logits, mean_loss), 1e-5, 0.01, "dlogits");
  // Each row of dlogits sums to 0 (the probabilities sum to 1), and grad_scale scales it.
  const TensorRef dl2 = m.alloc(DType::f32, rows * vocab);
  m.run(kernels::softmax_cross_entropy(0, tl, tt, dl2, loss, rows, vocab, 2.0 / rows));
  const std::vector<double> d1 = m.get(dl), d2 = m.get(dl2);
  for (size_t i = 0; i < d1.size(); ++i) REQUIRE(d2[i] == 2 * d1[i]);
  for (int64_t n = 0; n < rows; ++n) {
    double s = 0;
    for (int64_t v = 0; v < vocab; ++v) s += d1[n * vocab + v];
    REQUIRE(std::fabs(s) < 1e-6);
  }
}

TEST_CASE("softmax_cross_entropy takes bf16 logits and turns corrupted targets into NaN", "[core][kernels]") {
  const int64_t rows = 3, vocab = 5;
  Rng rng(62);
  const std::vector<double> logits = nonzero(rng, rows * vocab, 0.1, 3, DType::bf16);
  Mem m;
  const TensorRef tt = m.put(DType::i32, ids(rng, rows, vocab)), loss = m.alloc(DType::f32, 1);
  const TensorRef d32 = m.alloc(DType::f32, rows * vocab), d16 = m.alloc(DType::bf16, rows * vocab);
  m.run(kernels::softmax_cross_entropy(0, m.put(DType::f32, logits), tt, d32, loss, rows, vocab, 1.0));
  const double loss32 = m.get(loss)[0];
  m.run(kernels::softmax_cross_entropy(0, m.put(DType::bf16, logits), tt, d16, loss, rows, vocab, 1.0));
  REQUIRE(m.get(loss)[0] == loss32);
  REQUIRE(m.get(d16) == to_bf16_values(m.get(d32)));
  const TensorRef bad = m.put(DType::i32, {0, 5, 1});
  const TensorRef dl = m.alloc(DType::f32, rows * vocab);
  m.run(kernels::softmax_cross_entropy(0, m.put(DType::f32, logits), bad, dl, loss, rows, vocab, 1.0));
  REQUIRE(std::isnan(m.get(loss)[0]));
  const std::vector<double> g = m.get(dl);
  REQUIRE_FALSE(std::isnan(g[0]));
  REQUIRE(std::isnan(g[vocab]));  // the corrupted row
}

TEST_CASE("softmax_cross_entropy subtracts the row maximum so large logits stay finite", "[core][kernels]") {
  // exp(100) overflows fp32; shifted by the row maximum every exponent is <= 0.
  const std::vector<double> logits = {100, 98, 90.5, -3, -100, -97, -99.5, -120};
  const std::vector<double> targets = {1, 3};
  Mem m;
  const TensorRef dl = m.alloc(DType::f32, 8), loss = m.alloc(DType::f32, 1);
  m.run(kernels::softmax_cross_entropy(0, m.put(DType::f32, logits), m.put(DType::i32, targets), dl, loss, 2,
                                       4, 0.5));
  require_close(m.get(loss), {softmax_ce_ref(logits, targets, 2, 4)}, 1e-5, 0, "loss");
  const auto mean_loss = [&](const std::vector<double>& v) { return softmax_ce_ref(v, targets, 2, 4); };
  require_close(m.get(dl), finite_diff(logits, mean_loss), 1e-5, 0.01, "dlogits");
}

// ---- Optimizers. Expected values worked out by hand (in double) from the header's formulas.

TEST_CASE("adam matches hand-computed steps with and without coef", "[core][kernels]") {
  struct Case {
    int64_t step;
    double lr, weight_decay, coef;  // coef 0: no coef argument
    std::vector<double> param0, grad, m0, v0, param, m, v;
  };
  const std::vector<Case> cases = {
      // Step 1 from zero state: mhat / sqrt(vhat) = sign(g), so param moves by lr.
      {1,
       0.1,
       0.0,
       0.0,
       {1.0, -3.0},
       {0.5, -0.25},
       {0, 0},
       {0, 0},
       {0.900000002, -2.900000004},
       {0.05, -0.025},
       {0.00025, 0.0000625}},
      // Step 2 with state and weight decay 0.1: m = 0.9 m + 0.1 g, v = 0.999 v + 0.001 g^2,
      // mhat = m / 0.19, vhat = v / 0.001999.
      {2,
       0.01,
       0.1,
       0.0,
       {2.0, -0.5},
       {-1.0, 0.3},
       {0.1, -0.05},
       {0.01, 0.02},
       {1.9982244677472603, -0.4992508445636398},
       {-0.01, -0.015},
       {0.01099, 0.02007}},
      // The same with coef 0.5: g = grad * 0.5.
      {2,
       0.01,
       0.1,
       0.5,
       {2.0, -0.5},
       {-1.0, 0.3},
       {0.1, -0.05},
       {0.01, 0.02},
       {1.9970698289746511, -0.4990008490409212},
       {0.04, -0.03},
       {0.01024, 0.0200025}},
  };
  for (const Case& c : cases) {
    INFO("step " << c.step << " coef " << c.coef);
    Mem m;
    const TensorRef p = m.put(DType::f32, c.param0), g = m.put(DType::f32, c.grad);
    const TensorRef mm = m.put(DType::f32, c.m0), vv = m.put(DType::f32, c.v0);
    std::optional<TensorRef> coef;
    if (c.coef != 0) coef = m.put(DType::f64, {c.coef});
    kernel::Adam hyper;
    hyper.lr = c.lr;
    hyper.weight_decay = c.weight_decay;
    hyper.step = c.step;
    const KernelCall call = kernels::adam(0, p, g, mm, vv, coef, hyper);
    REQUIRE(std::get<kernel::Adam>(call.params).has_coef == coef.has_value());
    m.run(call);
    require_close(m.get(p), c.param, 1e-6, 0, "param");
    // 0.9 m + 0.1 g cancels (step 2): a few fp32 ulps of 0.1 in m.
    require_close(m.get(mm), c.m, 3e-6, 0, "m");
    require_close(m.get(vv), c.v, 1e-6, 0, "v");
  }
}

TEST_CASE("sgd matches hand-computed steps with and without coef", "[core][kernels]") {
  for (double coef : {0.0, 0.5}) {
    INFO("coef " << coef);
    Mem m;
    const TensorRef p = m.put(DType::f32, {1.0, -2.0}), g = m.put(DType::f32, {0.5, 1.0});
    std::optional<TensorRef> tc;
    if (coef != 0) tc = m.put(DType::f64, {coef});
    m.run(kernels::sgd(0, p, g, tc, kernel::Sgd{0.1, 0.01}));
    // param - 0.1 * (g * coef + 0.01 * param): 1 - 0.1 * (0.5 + 0.01) and -2 - 0.1 * (1 - 0.02)
    // without coef, 1 - 0.1 * (0.25 + 0.01) and -2 - 0.1 * (0.5 - 0.02) with coef 0.5.
    const std::vector<double> want =
        coef == 0 ? std::vector<double>{0.949, -2.098} : std::vector<double>{0.974, -2.048};
    require_close(m.get(p), want, 1e-6, 0, "param");
  }
}

TEST_CASE("adam and sgd with a bf16 param round only the stored result", "[core][kernels]") {
  Rng rng(71);
  const std::vector<double> p0 = nonzero(rng, 40, 0.1, 1, DType::bf16), g = nonzero(rng, 40, 0.1, 1);
  std::vector<double> v0 = nonzero(rng, 40, 0.01, 0.1);
  for (double& x : v0) x = std::fabs(x);
  Mem m;
  const TensorRef tg = m.put(DType::f32, g), coef = m.put(DType::f64, {0.75});
  const TensorRef p32 = m.put(DType::f32, p0), p16 = m.put(DType::bf16, p0);
  m.run(kernels::sgd(0, p32, tg, coef, kernel::Sgd{0.05, 0.1}));
  m.run(kernels::sgd(0, p16, tg, coef, kernel::Sgd{0.05, 0.1}));
  REQUIRE(m.get(p16) == to_bf16_values(m.get(p32)));
  REQUIRE(m.get(p32) != p0);
  // Adam: the same, with f32 state next to the bf16 param.
  const TensorRef q32 = m.put(DType::f32, p0), q16 = m.put(DType::bf16, p0);
  const TensorRef m32 = m.put(DType::f32, g), v32 = m.put(DType::f32, v0);
  const TensorRef m16 = m.put(DType::f32, g), v16 = m.put(DType::f32, v0);
  kernel::Adam hyper;
  hyper.step = 3;
  hyper.weight_decay = 0.01;
  m.run(kernels::adam(0, q32, tg, m32, v32, coef, hyper));
  m.run(kernels::adam(0, q16, tg, m16, v16, coef, hyper));
  REQUIRE(m.get(q16) == to_bf16_values(m.get(q32)));
  REQUIRE(m.get(q32) != p0);
  REQUIRE(m.get(m16) == m.get(m32));
  REQUIRE(m.get(v16) == m.get(v32));
}

// ---- Gradient norm and clipping.

TEST_CASE("sum_squares sums in f64 and accumulate adds to the previous acc", "[core][kernels]") {
  Mem m;
  const TensorRef acc = m.put(DType::f64, {123.0});  // overwritten without accumulate
  m.run(kernels::sum_squares(0, m.put(DType::f32, {1, -2, 3}), acc, false));
  REQUIRE(m.get(acc)[0] == 14.0);
  const KernelCall more = kernels::sum_squares(0, m.put(DType::bf16, {0.5, -1.5}), acc, true);
  REQUIRE(more.reads.size() == 2);
  m.run(more);
  REQUIRE(m.get(acc)[0] == 14.0 + 0.25 + 2.25);
  // Random f32 values: squares are exact in double; the sum is the fixed tree's (1000 values:
  // one block, lane t holds the squares t, t + 256, ... added in order, then a halving tree).
  Rng rng(81);
  const std::vector<double> x = nonzero(rng, 1000, 1e-3, 10);
  std::vector<double> lane(256, 0.0);
  for (size_t i = 0; i < x.size(); ++i) lane[i % 256] += x[i] * x[i];
  for (size_t stride = 128; stride > 0; stride /= 2) {
    for (size_t t = 0; t < stride; ++t) lane[t] += lane[t + stride];
  }
  const double want = lane[0] + 0.0;  // the final block's lane 0 holds it; its tree adds zeros
  m.run(kernels::sum_squares(0, m.put(DType::f32, x), acc, false));
  REQUIRE(m.get(acc)[0] == want);
  m.run(kernels::sum_squares(0, m.put(DType::f64, {0.1}), acc, true));
  REQUIRE(m.get(acc)[0] == want + 0.1 * 0.1);
}

TEST_CASE("clip_coef is 1 without max_norm and scales down only above it", "[core][kernels]") {
  Mem m;
  const TensorRef sumsq = m.put(DType::f64, {25.0}), coef = m.alloc(DType::f64, 1),
                  norm = m.alloc(DType::f64, 1);
  m.run(kernels::clip_coef(0, sumsq, coef, norm, 0.0));
  REQUIRE(m.get(norm)[0] == 5.0);
  REQUIRE(m.get(coef)[0] == 1.0);
  m.run(kernels::clip_coef(0, sumsq, coef, norm, 1.0));
  REQUIRE(m.get(coef)[0] == 1.0 / (5.0 + 1e-6));
  m.run(kernels::clip_coef(0, sumsq, coef, norm, 10.0));
  REQUIRE(m.get(coef)[0] == 1.0);
  // Clipping then stepping: sgd uses grad * coef.
  m.run(kernels::clip_coef(0, sumsq, coef, norm, 2.5));
  REQUIRE(m.get(coef)[0] == Approx(0.5).epsilon(1e-6));
  const TensorRef p = m.put(DType::f32, {1.0}), g = m.put(DType::f32, {4.0});
  m.run(kernels::sgd(0, p, g, coef, kernel::Sgd{0.25, 0.0}));
  REQUIRE(m.get(p)[0] == Approx(0.5).epsilon(1e-6));  // 1 - 0.25 * 4 * 0.5
}

// ---- Argument checks.

TEST_CASE("check_kernel explains wrong counts shapes and dtypes", "[core][kernels]") {
  auto f32 = [](int64_t n) { return TensorRef{0, 0, n, DType::f32}; };
  auto of = [](DType t, int64_t n) { return TensorRef{1, 0, n, t}; };
  const TensorRef tok = of(DType::i32, 4);
  const std::vector<std::pair<KernelCall, std::string>> cases = {
      {kernels::embedding_forward(0, f32(4), f32(12), f32(12), 4, 3),
       "tokens (reads[0]) is f32, expected i32"},
      {kernels::embedding_forward(0, tok, f32(11), f32(12), 4, 3),
       "weight (reads[1]) has 11 elements, expected 12 (V x H)"},
      {kernels::embedding_forward(0, tok, f32(12), f32(13), 4, 3),
       "out (writes[0]) has 13 elements, expected 12"},
      {kernels::embedding_backward(0, tok, f32(12), f32(12), 0, 3), "vocab and hidden must be positive"},
      {kernels::layernorm_forward(0, f32(6), f32(3), f32(3), f32(6), f32(3), f32(2), 2, 3),
       "mean (writes[1]) has 3 elements, expected 2 (N)"},
      {kernels::layernorm_forward(0, f32(6), f32(3), f32(3), f32(6), f32(2), f32(2), 2, 3, -1.0),
       "eps must be non-negative"},
      {kernels::layernorm_backward(0, f32(6), f32(6), f32(2), f32(2), f32(2), f32(6), f32(3), f32(3), 2, 3),
       "gamma (reads[2]) has 2 elements, expected 3 (H)"},
      {kernels::gemm(0, f32(6), f32(12), f32(8), {2, 4, 3, true, false}),
       "A (reads[0]) has 6 elements"},  // fine: A is 3 x 2 stored
      {kernels::gemm(0, f32(7), f32(12), f32(8), {2, 4, 3, true, false}), "expected 6 (K x M, trans_a)"},
      {kernels::gemm(0, f32(6), f32(12), of(DType::f64, 8), {2, 4, 3}),
       "C (writes[0]) is f64, expected f32 or bf16"},
      {kernels::gemm(0, f32(6), f32(12), f32(8), {2, 4, -3}), "m, n and k must be non-negative"},
      {kernels::bias_add(0, f32(6), f32(2), f32(6), 2, 3), "bias (reads[1]) has 2 elements, expected 3 (C)"},
      {kernels::bias_grad(0, f32(6), f32(3), -2, 3), "rows and cols must be non-negative"},
      {kernels::bias_gelu(0, f32(6), f32(3), f32(6), of(DType::f32, 6), 2, 3), ""},  // fine: y apart
      {kernels::bias_gelu(0, f32(6), f32(3), f32(6), TensorRef{0, 5, 6, DType::f32}, 2, 3),
       "y (writes[1]) must not overlap x or pre"},
      {kernels::bias_gelu(0, f32(6), f32(3), f32(6), f32(5), 2, 3),
       "y (writes[1]) has 5 elements, expected 6"},
      {kernels::gelu_forward(0, of(DType::f64, 4), f32(4)), "x (reads[0]) is f64, expected f32 or bf16"},
      {kernels::gelu_backward(0, f32(4), f32(3), f32(4)), "dy (reads[1]) has 3 elements, expected 4"},
      {kernels::round_bf16(0, of(DType::i32, 4), f32(4)), "in (reads[0]) is i32, expected f32 or bf16"},
      {kernels::round_to_grid(0, f32(4), f32(4), 0.0, 10), "the grid step q must be positive"},
      {kernels::round_to_grid(0, f32(4), f32(4), 0.5, -1), "limit must be non-negative"},
      {kernels::softmax_cross_entropy(0, f32(6), f32(2), f32(6), f32(1), 2, 3, 1),
       "targets (reads[1]) is f32"},
      {kernels::softmax_cross_entropy(0, f32(6), of(DType::i32, 2), f32(6), f32(2), 2, 3, 1),
       "loss (writes[1]) has 2 elements, expected 1"},
      {kernels::softmax_cross_entropy(0, f32(6), of(DType::i32, 2), f32(6), of(DType::bf16, 1), 2, 3, 1),
       "loss (writes[1]) is bf16, expected f32"},
      {kernels::adam(0, f32(4), f32(4), f32(4), f32(4), f32(1), {}), "coef (reads[4]) is f32, expected f64"},
      {kernels::adam(0, f32(4), f32(4), f32(4), f32(5), std::nullopt, {}), "v (reads[3]) has 5 elements"},
      {kernels::sgd(0, f32(4), f32(4), of(DType::f64, 2), {}), "coef (reads[2]) has 2 elements, expected 1"},
      {kernels::sum_squares(0, f32(4), f32(1), false), "acc (writes[0]) is f32, expected f64"},
      {kernels::sum_squares(0, f32(4), of(DType::f64, 2), true),
       "acc (writes[0]) has 2 elements, expected 1"},
      {kernels::clip_coef(0, of(DType::f64, 1), f32(1), of(DType::f64, 1), 1), "coef (writes[0]) is f32"},
      {kernels::clip_coef(0, of(DType::f64, 2), of(DType::f64, 1), of(DType::f64, 1), 1),
       "sumsq (reads[0]) has 2"},
  };
  for (const auto& [call, why] : cases) {
    INFO("kernel " << call.name << ", expecting: " << why);
    const std::string got = check_kernel(call).message();
    if (why == "A (reads[0]) has 6 elements" || why.empty()) {
      REQUIRE(got.empty());  // the control cases: a correct transposed call passes, and so on
      continue;
    }
    REQUIRE_THAT(got, Catch::Contains(why) && Catch::StartsWith("kernel '" + call.name + "': "));
    Mem m;
    REQUIRE_THROWS_AS(execute_cpu(call, m), InternalError);  // refused before touching memory
  }
}

TEST_CASE("check_kernel refuses in-place kernels whose outputs are not their inputs", "[core][kernels]") {
  const TensorRef a{0, 0, 4, DType::f32}, b{0, 4, 4, DType::f32}, c{0, 8, 4, DType::f32};
  const TensorRef coef{1, 0, 1, DType::f64};
  KernelCall adam = kernels::adam(0, a, b, c, b, std::nullopt, {});
  REQUIRE(check_kernel(adam).ok());
  adam.writes[1] = a.slice(1, 3);
  REQUIRE_THAT(check_kernel(adam).message(),
               Catch::Contains("m is updated in place: writes[1] must be reads[2]"));
  kernel::Adam at_zero;
  at_zero.step = 0;
  REQUIRE_THAT(check_kernel(kernels::adam(0, a, b, c, b, coef, at_zero)).message(),
               Catch::Contains("step counts from 1"));
  kernel::Adam claims_coef;
  claims_coef.has_coef = true;
  REQUIRE_THAT(check_kernel(kernels::adam(0, a, b, c, b, std::nullopt, claims_coef)).message(),
               Catch::Contains("takes 5 inputs and 3 outputs, got 4 and 3"));
  KernelCall sgd = kernels::sgd(0, a, b, coef, {});
  sgd.writes[0] = c;
  REQUIRE_THAT(check_kernel(sgd).message(), Catch::Contains("param is updated in place"));
  // Gemm reads C exactly when beta != 0, and then C must be the output.
  KernelCall gemm = kernels::gemm(0, a, b, c, {2, 2, 2, false, false, 1.0, 1.0});
  REQUIRE(check_kernel(gemm).ok());
  gemm.reads[2] = a;
  REQUIRE_THAT(check_kernel(gemm).message(), Catch::Contains("writes[0] must be reads[2]"));
  gemm.reads.pop_back();
  REQUIRE_THAT(check_kernel(gemm).message(), Catch::Contains("beta != 0 makes C an input"));
  gemm.params = kernel::Gemm{2, 2, 2};
  gemm.reads.push_back(c);
  REQUIRE_THAT(check_kernel(gemm).message(), Catch::Contains("beta == 0 never reads C"));
  gemm.reads.push_back(c);
  REQUIRE_THAT(check_kernel(gemm).message(), Catch::Contains("takes 2 inputs and 1 outputs, got 4 and 1"));
  KernelCall acc = kernels::sum_squares(0, a, coef, true);
  acc.reads[1] = TensorRef{2, 0, 1, DType::f64};
  REQUIRE_THAT(check_kernel(acc).message(), Catch::Contains("writes[0] must be reads[1]"));
}

// ---- Determinism: the same call on the same bytes writes the same bytes.

TEST_CASE("every model kernel is deterministic", "[core][kernels]") {
  const int64_t rows = 6, hidden = 8, vocab = 10;
  auto build = [&](Mem& m) {
    Rng rng(91);  // the same draws for both memories
    std::vector<KernelCall> calls;
    const TensorRef tok = m.put(DType::i32, ids(rng, rows, vocab)),
                    wte = m.put(DType::f32, nonzero(rng, vocab * hidden, 0.1, 1));
    const TensorRef x = m.alloc(DType::f32, rows * hidden),
                    g = m.put(DType::f32, nonzero(rng, hidden, 0.5, 1.5));
    const TensorRef be = m.put(DType::f32, nonzero(rng, hidden, 0.1, 1)),
                    y = m.alloc(DType::f32, rows * hidden);
    const TensorRef mean = m.alloc(DType::f32, rows), rstd = m.alloc(DType::f32, rows);
    const TensorRef h = m.alloc(DType::f32, rows * hidden), hb = m.alloc(DType::f32, rows * hidden);
    const TensorRef logits = m.alloc(DType::bf16, rows * vocab), dlog = m.alloc(DType::f32, rows * vocab);
    const TensorRef loss = m.alloc(DType::f32, 1), dh = m.alloc(DType::f32, rows * hidden);
    const TensorRef dwte = m.alloc(DType::f32, vocab * hidden), dy = m.alloc(DType::f32, rows * hidden);
    const TensorRef dx = m.alloc(DType::f32, rows * hidden), dg = m.alloc(DType::f32, hidden);
    const TensorRef db = m.alloc(DType::f32, hidden), dbias = m.alloc(DType::f32, hidden);
    const TensorRef grid = m.alloc(DType::f32, vocab * hidden), acc = m.alloc(DType::f64, 1);
    const TensorRef coef = m.alloc(DType::f64, 1), norm = m.alloc(DType::f64, 1);
    const TensorRef am = m.alloc(DType::f32, vocab * hidden), av = m.alloc(DType::f32, vocab * hidden);
    calls.push_back(kernels::embedding_forward(0, tok, wte, x, vocab, hidden));
    calls.push_back(kernels::layernorm_forward(0, x, g, be, y, mean, rstd, rows, hidden));
    calls.push_back(kernels::gelu_forward(0, y, h));
    calls.push_back(kernels::bias_add(0, h, be, hb, rows, hidden));
    calls.push_back(kernels::gemm(0, hb, wte, logits, {rows, vocab, hidden, false, true}));
    calls.push_back(kernels::softmax_cross_entropy(0, logits, tok, dlog, loss, rows, vocab, 1.0 / rows));
    calls.push_back(kernels::gemm(0, dlog, wte, dh, {rows, hidden, vocab}));
    calls.push_back(kernels::gemm(0, dlog, hb, dwte, {vocab, hidden, rows, true, false}));
    calls.push_back(kernels::bias_grad(0, dh, dbias, rows, hidden));
    calls.push_back(kernels::gelu_backward(0, y, dh, dy));
    calls.push_back(kernels::layernorm_backward(0, dy, x, g, mean, rstd, dx, dg, db, rows, hidden));
    calls.push_back(kernels::embedding_backward(0, tok, dx, dwte, vocab, hidden));
    calls.push_back(kernels::round_to_grid(0, dwte, grid, 0x1p-20, 1 << 20));
    calls.push_back(kernels::round_bf16(0, grid, grid));
    calls.push_back(kernels::sum_squares(0, grid, acc, false));
    calls.push_back(kernels::sum_squares(0, dg, acc, true));
    calls.push_back(kernels::clip_coef(0, acc, coef, norm, 1e-3));
    calls.push_back(kernels::adam(0, wte, grid, am, av, coef, {}));
    calls.push_back(kernels::sgd(0, g, dg, coef, {}));
    return calls;
  };
  Mem first, second;
  const std::vector<KernelCall> calls = build(first);
  const std::vector<KernelCall> again = build(second);
  REQUIRE(calls.size() == again.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    first.run(calls[i]);
    second.run(again[i]);
    for (const TensorRef& w : calls[i].writes) {
      INFO("kernel " << calls[i].name << " output on buffer " << w.buffer);
      REQUIRE(first.bytes(w) == second.bytes(w));
      bool nonzero_out = false;
      for (double v : first.get(w)) nonzero_out |= v != 0.0;
      REQUIRE(nonzero_out);
      for (double v : first.get(w)) REQUIRE(std::isfinite(v));
    }
  }
}

TEST_CASE("the kernels give the same bits at every vector width the processor runs", "[core][kernels]") {
  // GELU forward, backward and with a bias, and round_to_grid on a power-of-two grid (the
  // multiplying loop) and on another (the dividing one), at each SIMD level against the
  // baseline: lengths with tails past every register width, and the values where a lane
  // could differ (signed zeros, ties, NaN, infinities, the tanh polynomial's seam at 1, the
  // clamp at 9.5, subnormals).
  struct Restore {
    ~Restore() { cpu::force_simd_level(cpu::simd_levels().back()); }
  } restore;
  auto inputs = [](Rng& rng, int64_t n) {
    std::vector<double> v = {0.0,           -0.0,           1.0,       -1.0, 0.99999994, 1.0000001,
                             9.5,           -9.5,           9.4999990, 30.0, -30.0,      1e-40,
                             -1e-40,        INFINITY,       -INFINITY, NAN,  0.5,        -2.5,
                             0x1p-20 * 2.5, -0x1p-20 * 3.5, 1e30,      -1e30};
    while (static_cast<int64_t>(v.size()) < n)
      v.push_back(std::ldexp(2 * rng.uniform_real() - 1, static_cast<int>(rng.uniform_int(-24, 5))));
    v.resize(static_cast<size_t>(n));
    return v;
  };
  auto run_all = [&](cpu::SimdLevel level) {
    cpu::force_simd_level(level);
    std::vector<std::vector<std::byte>> out;
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{33}, int64_t{1000}}) {
      Rng rng(static_cast<uint64_t>(n));
      Mem m;
      const TensorRef x = m.put(DType::f32, inputs(rng, n)), dy = m.put(DType::f32, inputs(rng, n));
      const TensorRef bias = m.put(DType::f32, inputs(rng, 1));
      const TensorRef y = m.alloc(DType::f32, n), dx = m.alloc(DType::f32, n), pre = m.alloc(DType::f32, n),
                      yb = m.alloc(DType::f32, n), g2 = m.alloc(DType::f32, n), g3 = m.alloc(DType::f32, n),
                      g4 = m.alloc(DType::f32, n);
      m.run(kernels::gelu_forward(0, x, y));
      m.run(kernels::gelu_backward(0, x, dy, dx));
      m.run(kernels::bias_gelu(0, x, bias, pre, yb, n, 1));
      m.run(kernels::round_to_grid(0, x, g2, 0x1p-20, 1 << 20));
      m.run(kernels::round_to_grid(0, x, g3, 3 * 0x1p-20, 1 << 20));
      m.run(kernels::round_to_grid(0, x, g4, 0x1p+3, 5));
      for (const TensorRef& t : {y, dx, pre, yb, g2, g3, g4}) out.push_back(m.bytes(t));
    }
    return out;
  };
  const auto levels = cpu::simd_levels();
  const auto base = run_all(cpu::SimdLevel::baseline);
  for (const cpu::SimdLevel level : levels) {
    CAPTURE(cpu::to_string(level));
    REQUIRE(run_all(level) == base);
  }
  CHECK(levels.front() == cpu::SimdLevel::baseline);
}

TEST_CASE("round_to_grid is the division's result, bit for bit, on every grid", "[core][kernels]") {
  // The loop multiplies by 1 / q where q is a power of two and divides otherwise; both are held
  // to (float)(q * nearbyint(clamp((double)x / q))) computed here with the division, over every
  // binade of fp32, on powers of two and on grids whose reciprocal is inexact (0.1, 3 * 2^-20).
  Rng rng(41);
  std::vector<double> values = {0.0, -0.0, NAN, INFINITY, -INFINITY, 1e-45, -1e-45, 3.4e38, -3.4e38};
  for (int i = 0; i < 4000; ++i) {
    const double mag = std::ldexp(rng.uniform_real(), static_cast<int>(rng.uniform_int(-149, 127)));
    values.push_back(rng.bernoulli(0.5) ? -mag : mag);
  }
  for (const double q : {0x1p-40, 0x1p-20, 0x1p-1, 1.0, 0x1p+10, 3 * 0x1p-20, 5 * 0x1p-10, 0.1, 0.7}) {
    // Ties, where a product that is off by one unit of the double rounds the other way.
    std::vector<double> ties;
    for (int k = -300; k <= 300; ++k) ties.push_back(static_cast<float>((k + 0.5) * q));
    for (const double limit : {1.0 * (1 << 20), 1e30, 3.0}) {
      CAPTURE(q, limit);
      std::vector<double> in = ties;
      in.insert(in.end(), values.begin(), values.end());
      Mem m;
      const TensorRef x = m.put(DType::f32, in), y = m.alloc(DType::f32, x.numel);
      m.run(kernels::round_to_grid(0, x, y, q, limit));
      const std::vector<double> got = m.get(y);
      for (size_t i = 0; i < in.size(); ++i) {
        const float xf = static_cast<float>(in[i]);
        const double units = std::clamp(static_cast<double>(xf) / q, -limit, limit);
        const float want = static_cast<float>(q * std::nearbyint(units));
        const float g = static_cast<float>(got[i]);
        INFO("x = " << in[i]);
        REQUIRE(std::memcmp(&want, &g, sizeof g) == 0);
      }
    }
  }
}

TEST_CASE("divide gives the division's bits, by powers of two and by other divisors", "[core][kernels]") {
  // f32 divided by a power of two multiplies by the exact reciprocal; held here to the
  // division itself over every binade of fp32 (subnormal results included), in place and not,
  // at every vector width, and by divisors whose reciprocal is inexact (3, 0.1) or not normal.
  struct Restore {
    ~Restore() { cpu::force_simd_level(cpu::simd_levels().back()); }
  } restore;
  Rng rng(43);
  std::vector<double> in = {0.0, -0.0, NAN, INFINITY, -INFINITY, 1e-45, -1e-45, 3.4e38, -3.4e38, 1.5e-38};
  for (int i = 0; i < 3000; ++i) {
    const double mag = std::ldexp(rng.uniform_real(), static_cast<int>(rng.uniform_int(-149, 127)));
    in.push_back(rng.bernoulli(0.5) ? -mag : mag);
  }
  for (const cpu::SimdLevel level : cpu::simd_levels()) {
    cpu::force_simd_level(level);
    for (const double d : {16.0, 2.0, 0.25, 0x1p-100, 0x1p127, 1.0, 3.0, 0.1, -8.0, 0x1p-140}) {
      CAPTURE(cpu::to_string(level), d);
      Mem m;
      const TensorRef x = m.put(DType::f32, in), y = m.alloc(DType::f32, x.numel);
      const TensorRef z = m.put(DType::f32, in);
      m.run(kernels::divide(0, x, y, d));
      m.run(kernels::divide(0, z, z, d));
      const std::vector<double> got = m.get(y), got_in_place = m.get(z);
      for (size_t i = 0; i < in.size(); ++i) {
        const float want = static_cast<float>(in[i]) / static_cast<float>(d);
        const float g = static_cast<float>(got[i]), gi = static_cast<float>(got_in_place[i]);
        INFO("x = " << in[i]);
        REQUIRE(std::memcmp(&want, &g, sizeof g) == 0);
        REQUIRE(std::memcmp(&want, &gi, sizeof gi) == 0);
      }
    }
  }
}

TEST_CASE("gemm writing over its own operand gives what a separate output gets", "[core][kernels]") {
  // A and B are read where they lie when they are f32 and untransposed, and C is written where
  // it lies unless it shares bytes with such an operand: C over A, over B and over both (one
  // buffer), each against the same product into a separate tensor, bit for bit.
  const int64_t S = 40;  // square, so C fits exactly over an operand; two column blocks and a tail
  Rng rng(47);
  const std::vector<double> a = nonzero(rng, S * S, 0.1, 1), b = nonzero(rng, S * S, 0.1, 1);
  for (int variant = 0; variant < 12; ++variant) {
    const bool ta = (variant & 1) != 0, tb = (variant & 2) != 0;
    const int over = variant / 4;  // 0: C over A, 1: C over B, 2: A, B and C one tensor
    CAPTURE(ta, tb, over);
    const kernel::Gemm g{S, S, S, ta, tb, 0.75, 0.0};
    Mem sep;
    const TensorRef sa = sep.put(DType::f32, a), sb = sep.put(DType::f32, over == 2 ? a : b),
                    sc = sep.alloc(DType::f32, S * S);
    sep.run(kernels::gemm(0, sa, sb, sc, g));
    Mem m;
    const TensorRef xa = m.put(DType::f32, a);
    const TensorRef xb = over == 2 ? xa : m.put(DType::f32, b);
    const TensorRef xc = over == 1 ? xb : xa;
    m.run(kernels::gemm(0, xa, xb, xc, g));
    REQUIRE(m.bytes(xc) == sep.bytes(sc));
  }
}

TEST_CASE("elementwise kernels in place and over overlapping ranges give the separate-output bits",
          "[core][kernels]") {
  // GELU forward and backward, round_to_grid and bias_add compute in their output's memory
  // where every input can still be read as it was; in place, over an output that partly
  // overlaps an input (they then go through copies) and with the other input inside the
  // output, each against the same call on separate tensors.
  const int64_t n = 40, shift = 3;
  Rng rng(53);
  const std::vector<double> x = nonzero(rng, n, 0.05, 3), dy = nonzero(rng, n, 0.05, 2);
  const std::vector<double> bias = nonzero(rng, 8, 0.1, 1);
  // x sits at element n of a buffer of 3n; the output at out_at of the same buffer.
  auto run = [&](const std::string& kernel, int64_t out_at, bool other_in_out) {
    Mem m;
    std::vector<double> all(static_cast<size_t>(3 * n), 0.0);
    std::copy(x.begin(), x.end(), all.begin() + n);
    const TensorRef buf = m.put(DType::f32, all);
    auto at = [&](int64_t off) { return TensorRef{buf.buffer, buf.offset + off, n, DType::f32}; };
    const TensorRef in = at(n), out = at(out_at);
    TensorRef other = m.put(DType::f32, kernel == "bias_add" ? bias : dy);
    if (other_in_out) {  // the other input inside the output's range
      for (int64_t i = 0; i < other.numel; ++i)
        store_element(m.data(out), DType::f32, i, load_element(m.data(other), DType::f32, i));
      other = TensorRef{out.buffer, out.offset, other.numel, DType::f32};
    }
    if (kernel == "gelu_forward") m.run(kernels::gelu_forward(0, in, out));
    if (kernel == "gelu_backward") m.run(kernels::gelu_backward(0, in, other, out));
    if (kernel == "round_to_grid") m.run(kernels::round_to_grid(0, in, out, 0x1p-8, 1 << 20));
    if (kernel == "bias_add") m.run(kernels::bias_add(0, in, other, out, n / 8, 8));
    return m.bytes(out);
  };
  for (const std::string kernel : {"gelu_forward", "gelu_backward", "round_to_grid", "bias_add"}) {
    const auto separate = run(kernel, 2 * n, false);
    for (const int64_t out_at : {n, n - shift, n + shift, int64_t{0}}) {
      CAPTURE(kernel, out_at);
      REQUIRE(run(kernel, out_at, false) == separate);
    }
    if (kernel == "gelu_backward") {
      CAPTURE("dy is dx");
      REQUIRE(run(kernel, 2 * n, true) == separate);
    }
  }
}
