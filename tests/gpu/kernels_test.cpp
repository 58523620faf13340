// Every kernel type except Gemm (blas_test.cpp) on the GPU against the CPU reference: bit for
// bit where the CPU's arithmetic is a fixed sequence of IEEE operations the GPU reproduces,
// within a stated tolerance where it uses libm (softmax) or a sequential order a
// parallel kernel does not keep (SumSquares). Inputs are nonzero values from the seeded Rng;
// outputs start poisoned; sizes are not multiples of the block sizes; tensors start at
// misaligned addresses. bf16 variants and in-place calls are included where the model uses them.
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "tests/gpu/gpu_test_support.hpp"
#include "tests/gpu/kernel_harness.hpp"

using namespace shardcheck;
using namespace shardcheck::gpu_test;
namespace kernels = core::kernels;

namespace {
constexpr core::StreamId kS = 0;
constexpr DType kFloats[] = {DType::f32, DType::bf16, DType::f64};
}  // namespace

TEST_CASE("gpu opaque writes the CPU's pattern over every output", "[gpu]") {
  SC_REQUIRE_GPU();
  KernelTwin twin;
  core::Rng rng(1);
  const TensorRef in = twin.random(DType::f32, 100, rng);
  const TensorRef a = twin.alloc(DType::f32, 1001), b = twin.alloc(DType::u8, 77),
                  c = twin.alloc(DType::bf16, 3);
  twin.require_bitwise(twin.run(kernels::opaque("trace.kernel", kS, {in}, {a, b, c})));
}

TEST_CASE("gpu fill matches the CPU bit for bit in every dtype", "[gpu]") {
  SC_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8}) {
    INFO("dtype " << core::to_string(dt));
    KernelTwin twin;
    const TensorRef out = twin.alloc(dt, 10007);
    twin.require_bitwise(twin.run(kernels::fill(kS, out, core::is_float(dt) ? -2.3 : 3.7)));
  }
}

TEST_CASE("gpu copy converts between dtypes bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  for (DType from : kFloats) {
    for (DType to : kFloats) {
      INFO(core::to_string(from) << " to " << core::to_string(to));
      KernelTwin twin;
      core::Rng rng(2);
      const TensorRef in = twin.random(from, 10007, rng, 3.0);
      twin.require_bitwise(twin.run(kernels::copy(kS, in, twin.alloc(to, 10007))));
    }
  }
  // Integer operands go through float (or double, next to an f64) as on the CPU.
  const std::vector<double> ints = {1, -7, 120, 3, 255, 42, -1000, 17, 9};
  const std::vector<double> small = {1, 7, 120, 3, 255, 42, 100, 17, 9};
  const std::vector<double> reals = {1.5, -7.25, 120.75, 3.0, -255.5, 42.125, -1000.875, 17.0, 9.5};
  struct Case {
    DType from;
    const std::vector<double>* values;
    DType to;
  };
  for (const Case& c : {Case{DType::i32, &ints, DType::f32}, Case{DType::f32, &reals, DType::i32},
                        Case{DType::u8, &small, DType::bf16}, Case{DType::i64, &ints, DType::f64},
                        Case{DType::f64, &reals, DType::i64}}) {
    INFO(core::to_string(c.from) << " to " << core::to_string(c.to));
    KernelTwin twin;
    const TensorRef in = twin.put(c.from, *c.values);
    twin.require_bitwise(twin.run(kernels::copy(kS, in, twin.alloc(c.to, in.numel))));
  }
}

TEST_CASE("gpu add matches the CPU bit for bit, mixed dtypes and in place", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType a, b, out;
    bool in_place;
  };
  for (const Case& c :
       {Case{DType::f32, DType::f32, DType::f32, false}, Case{DType::bf16, DType::f32, DType::bf16, false},
        Case{DType::bf16, DType::bf16, DType::bf16, true}, Case{DType::f64, DType::f32, DType::f32, false},
        Case{DType::f32, DType::f32, DType::f32, true}}) {
    INFO(core::to_string(c.a) << " + " << core::to_string(c.b) << " -> " << core::to_string(c.out)
                              << (c.in_place ? " in place" : ""));
    KernelTwin twin;
    core::Rng rng(3);
    const TensorRef a = twin.random(c.a, 10007, rng), b = twin.random(c.b, 10007, rng);
    const TensorRef out = c.in_place ? a : twin.alloc(c.out, 10007);
    twin.require_bitwise(twin.run(kernels::add(kS, a, b, out)));
  }
}

TEST_CASE("gpu scale and divide match the CPU bit for bit, in place too", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType in, out;
    bool in_place;
    int64_t n;
  };
  // 2^20 + 4099 f32 elements need more blocks than one grid launches: the loop strides.
  for (const Case& c :
       {Case{DType::f32, DType::f32, true, (1 << 20) + 4099}, Case{DType::bf16, DType::bf16, false, 10007},
        Case{DType::bf16, DType::f32, false, 10007}, Case{DType::f64, DType::f32, false, 999},
        Case{DType::f64, DType::f64, true, 999}}) {
    INFO(core::to_string(c.in) << " -> " << core::to_string(c.out) << (c.in_place ? " in place" : ""));
    KernelTwin twin;
    core::Rng rng(4);
    const TensorRef in = twin.random(c.in, c.n, rng, 10.0);
    const TensorRef out = c.in_place ? in : twin.alloc(c.out, c.n);
    twin.require_bitwise(twin.run(kernels::scale(kS, in, out, 0.3)));
    twin.require_bitwise(twin.run(kernels::divide(kS, in, out, 3.0)));  // inexact quotients
    twin.require_bitwise(twin.run(kernels::divide(kS, in, out, -7.0)));
  }
}

TEST_CASE("gpu round_bf16 and round_to_grid match the CPU bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType in, out;
  };
  for (const Case& c :
       {Case{DType::f32, DType::f32}, Case{DType::bf16, DType::f32}, Case{DType::f32, DType::bf16}}) {
    INFO(core::to_string(c.in) << " -> " << core::to_string(c.out));
    KernelTwin twin;
    core::Rng rng(5);
    const TensorRef in = twin.random(c.in, 10007, rng, 2.0);
    const TensorRef out = twin.alloc(c.out, 10007);
    twin.require_bitwise(twin.run(kernels::round_bf16(kS, in, out)));
    // |x| / q reaches about 2000: the limit of 300 clamps some values; q = 0.1 is inexact.
    twin.require_bitwise(twin.run(kernels::round_to_grid(kS, in, out, 1.0 / 256, 300)));
    twin.require_bitwise(twin.run(kernels::round_to_grid(kS, in, out, 0.1, 1e6)));
  }
  KernelTwin twin;  // in place, and exact ties (k + 0.5 grid steps round to even)
  const TensorRef x = twin.put(DType::f32, {0.5, 1.5, 2.5, -0.5, -1.5, 3.25, -0.0, 1e30});
  twin.require_bitwise(twin.run(kernels::round_to_grid(kS, x, x, 1.0, 1e6)));
}

TEST_CASE("gpu embedding forward matches the CPU bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType weight, out;
  };
  for (const Case& c :
       {Case{DType::f32, DType::f32}, Case{DType::bf16, DType::f32}, Case{DType::f32, DType::bf16}}) {
    INFO(core::to_string(c.weight) << " -> " << core::to_string(c.out));
    KernelTwin twin;
    core::Rng rng(6);
    const int64_t vocab = 50, hidden = 37, n = 301;
    const TensorRef tokens = twin.ids(n, vocab, rng), weight = twin.random(c.weight, vocab * hidden, rng);
    twin.require_bitwise(twin.run(
        kernels::embedding_forward(kS, tokens, weight, twin.alloc(c.out, n * hidden), vocab, hidden)));
  }
  KernelTwin twin;  // corrupted ids give NaN rows, with the CPU's NaN bits
  core::Rng rng(6);
  const TensorRef tokens = twin.put(DType::i32, {3, 50, 0, -1, 49});
  const TensorRef weight = twin.random(DType::f32, 50 * 8, rng);
  twin.require_bitwise(
      twin.run(kernels::embedding_forward(kS, tokens, weight, twin.alloc(DType::bf16, 5 * 8), 50, 8)));
}

TEST_CASE("gpu embedding backward sums tokens in the chunked order, bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType dout, dweight;
    int64_t vocab, hidden, n;
  };
  // vocab 13 with 301 tokens: every row sums many repeats; vocab 500: most rows stay zero.
  // hidden 70 is part of one warp's 256 columns (8 per lane); 300 is a whole 256 and part of
  // another. 1000 tokens are 16 chunks of 64, the last one partial.
  for (const Case& c :
       {Case{DType::f32, DType::f32, 13, 70, 301}, Case{DType::bf16, DType::bf16, 13, 70, 301},
        Case{DType::f32, DType::bf16, 500, 16, 100}, Case{DType::bf16, DType::f32, 7, 33, 1000},
        Case{DType::f32, DType::f32, 5, 300, 1000}}) {
    INFO(core::to_string(c.dout) << " -> " << core::to_string(c.dweight) << " vocab " << c.vocab);
    KernelTwin twin;
    core::Rng rng(7);
    const TensorRef tokens = twin.ids(c.n, c.vocab, rng), dout = twin.random(c.dout, c.n * c.hidden, rng);
    const TensorRef dweight = twin.alloc(c.dweight, c.vocab * c.hidden);
    twin.require_bitwise(twin.run(kernels::embedding_backward(kS, tokens, dout, dweight, c.vocab, c.hidden)));
    // Mixed precision's gradient rounding, fused: the same bits as the CPU's too.
    twin.require_bitwise(twin.run(
        kernels::embedding_backward(kS, tokens, dout, dweight, c.vocab, c.hidden, /*round_bf16=*/true)));
  }
  KernelTwin twin;  // one corrupted id poisons the whole gradient
  core::Rng rng(7);
  const TensorRef tokens = twin.put(DType::i32, {1, 2, 3, 13, 4});
  const TensorRef dout = twin.random(DType::f32, 5 * 40, rng);
  twin.require_bitwise(
      twin.run(kernels::embedding_backward(kS, tokens, dout, twin.alloc(DType::f32, 13 * 40), 13, 40)));
}

TEST_CASE("gpu layernorm forward matches the CPU bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType x, params, y, stats;
    int64_t rows, hidden;
    bool in_place;
  };
  // hidden 300 is wider than a row block (256 threads); 77 is not a multiple of a warp.
  for (const Case& c : {Case{DType::f32, DType::f32, DType::f32, DType::f32, 37, 77, false},
                        Case{DType::bf16, DType::bf16, DType::bf16, DType::f32, 37, 77, false},
                        Case{DType::f32, DType::bf16, DType::f32, DType::bf16, 5, 300, false},
                        Case{DType::f32, DType::f32, DType::f32, DType::f32, 9, 16, true}}) {
    INFO(core::to_string(c.x) << " rows " << c.rows << " hidden " << c.hidden
                              << (c.in_place ? " in place" : ""));
    KernelTwin twin;
    core::Rng rng(8);
    const TensorRef x = twin.random(c.x, c.rows * c.hidden, rng, 2.0);
    const TensorRef gamma = twin.random(c.params, c.hidden, rng), beta = twin.random(c.params, c.hidden, rng);
    const TensorRef y = c.in_place ? x : twin.alloc(c.y, c.rows * c.hidden);
    const TensorRef mean = twin.alloc(c.stats, c.rows), rstd = twin.alloc(c.stats, c.rows);
    twin.require_bitwise(
        twin.run(kernels::layernorm_forward(kS, x, gamma, beta, y, mean, rstd, c.rows, c.hidden, 1e-5)));
  }
}

TEST_CASE("gpu layernorm backward matches the CPU bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType dt;
    int64_t rows, hidden;
    bool in_place;
  };
  // rows 130: three 64-row chunks, the last partial; rows 1100: 18 chunks, more than one block
  // sums at once (gpu/column_sum.cuh's kChunkSlots), so the chunk sums are added in two groups.
  for (const Case& c :
       {Case{DType::f32, 37, 77, false}, Case{DType::bf16, 37, 77, false}, Case{DType::f32, 5, 300, false},
        Case{DType::f32, 9, 16, true}, Case{DType::bf16, 9, 40, true}, Case{DType::f32, 130, 70, false},
        Case{DType::bf16, 1100, 40, true}}) {
    INFO(core::to_string(c.dt) << " rows " << c.rows << " hidden " << c.hidden
                               << (c.in_place ? " dx = dy" : ""));
    KernelTwin twin;
    core::Rng rng(9);
    const int64_t nh = c.rows * c.hidden;
    const TensorRef dy = twin.random(c.dt, nh, rng), x = twin.random(c.dt, nh, rng, 2.0);
    const TensorRef gamma = twin.random(c.dt, c.hidden, rng), mean = twin.random(c.dt, c.rows, rng, 0.1);
    std::vector<double> rs(static_cast<size_t>(c.rows));
    for (double& r : rs) r = 0.5 + std::abs(rng.normal());
    const TensorRef rstd = twin.put(c.dt, rs);
    const TensorRef dx = c.in_place ? dy : twin.alloc(c.dt, nh);
    const TensorRef dgamma = twin.alloc(c.dt, c.hidden), dbeta = twin.alloc(c.dt, c.hidden);
    twin.require_bitwise(twin.run(
        kernels::layernorm_backward(kS, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, c.rows, c.hidden)));
    if (c.in_place) continue;  // dy was overwritten
    twin.require_bitwise(twin.run(kernels::layernorm_backward(kS, dy, x, gamma, mean, rstd, dx, dgamma, dbeta,
                                                              c.rows, c.hidden, /*round_bf16=*/true)));
  }
}

TEST_CASE("gpu bias add and bias grad match the CPU bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType x, bias, y;
    int64_t rows, cols;
    bool in_place;
  };
  for (const Case& c : {Case{DType::f32, DType::f32, DType::f32, 33, 65, true},
                        Case{DType::bf16, DType::f32, DType::bf16, 33, 65, false},
                        Case{DType::bf16, DType::bf16, DType::f32, 1000, 77, false},
                        Case{DType::f32, DType::f32, DType::f32, 2100, 33, false},
                        Case{DType::f32, DType::f32, DType::bf16, 0, 12, false}}) {
    INFO(core::to_string(c.x) << " rows " << c.rows << " cols " << c.cols << (c.in_place ? " in place" : ""));
    KernelTwin twin;
    core::Rng rng(10);
    const TensorRef x = twin.random(c.x, c.rows * c.cols, rng), bias = twin.random(c.bias, c.cols, rng);
    const TensorRef y = c.in_place ? x : twin.alloc(c.y, c.rows * c.cols);
    twin.require_bitwise(twin.run(kernels::bias_add(kS, x, bias, y, c.rows, c.cols)));
    // bias grad: each column sums its rows in core's chunked order (0 rows: zeros).
    twin.require_bitwise(twin.run(kernels::bias_grad(kS, x, twin.alloc(c.y, c.cols), c.rows, c.cols)));
    twin.require_bitwise(
        twin.run(kernels::bias_grad(kS, x, twin.alloc(c.y, c.cols), c.rows, c.cols, /*round_bf16=*/true)));
  }
}

// bias_gelu is bias_add then gelu_forward in one pass: pre and y bit for bit with the CPU (one
// tanh, core/kernels/tanh_f32.hpp, on both), and with the two GPU kernels apart.
TEST_CASE("gpu bias_gelu is the GPU's bias_add then gelu_forward, bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType act;
    int64_t rows, cols;
    bool in_place;
  };
  for (const Case& c : {Case{DType::f32, 33, 65, true}, Case{DType::bf16, 33, 65, true},
                        Case{DType::bf16, 1000, 77, false}, Case{DType::f32, 0, 12, false}}) {
    INFO(core::to_string(c.act) << " rows " << c.rows << " cols " << c.cols
                                << (c.in_place ? " in place" : ""));
    auto make = [&](KernelTwin& twin) {
      core::Rng rng(12);
      const TensorRef x = twin.random(c.act, c.rows * c.cols, rng, 2.0),
                      bias = twin.random(DType::f32, c.cols, rng);
      const TensorRef pre = c.in_place ? x : twin.alloc(c.act, c.rows * c.cols);
      return std::tuple{x, bias, pre, twin.alloc(c.act, c.rows * c.cols)};
    };
    KernelTwin fused;
    const auto [x, bias, pre, y] = make(fused);
    fused.require_bitwise(fused.run(kernels::bias_gelu(kS, x, bias, pre, y, c.rows, c.cols)));
    KernelTwin one, apart;
    make(one);
    make(apart);
    const Snapshot together = one.run_gpu(kernels::bias_gelu(kS, x, bias, pre, y, c.rows, c.cols));
    apart.require_bitwise(
        apart.run(kernels::bias_add(kS, x, bias, pre, c.rows, c.cols)));  // host pre = GPU's
    const Snapshot split = apart.run_gpu(kernels::gelu_forward(kS, pre, y));
    CHECK(together[static_cast<size_t>(pre.buffer)] == split[static_cast<size_t>(pre.buffer)]);
    CHECK(together[static_cast<size_t>(y.buffer)] == split[static_cast<size_t>(y.buffer)]);
  }
}

// Both backends evaluate tanh as core/kernels/tanh_f32.hpp, with every other operation in the
// CPU's order and no FMA: equal bit for bit, including inputs past tanh's saturation (scale 12).
TEST_CASE("gpu gelu forward and backward equal the CPU bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  for (const DType dt : {DType::f32, DType::bf16}) {
    for (const double scale : {2.0, 12.0}) {
      INFO(core::to_string(dt) << " scale " << scale);
      KernelTwin twin;
      core::Rng rng(11);
      const TensorRef x = twin.random(dt, 10007, rng, scale), dy = twin.random(dt, 10007, rng);
      const TensorRef y = twin.alloc(dt, 10007);
      twin.require_bitwise(twin.run(kernels::gelu_forward(kS, x, y)));
      twin.require_bitwise(
          twin.run(kernels::gelu_backward(kS, x, dy, dy)));  // in place, as the model calls it
      const TensorRef dx = twin.alloc(DType::f32, 10007);
      twin.require_bitwise(twin.run(kernels::gelu_backward(kS, x, y, dx)));
    }
  }
}

// The row sums are a tree and expf/logf are CUDA's: tolerance. The loss's sum over rows is
// the CPU's order; its terms differ in the last bits.
TEST_CASE("gpu softmax cross-entropy is within tolerance of the CPU", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType logits, dlogits;
    int64_t rows, vocab;
    bool in_place;
    double tol;
  };
  for (const Case& c : {Case{DType::f32, DType::f32, 37, 1000, false, kTolF32},
                        Case{DType::f32, DType::f32, 37, 50, true, kTolF32},
                        Case{DType::bf16, DType::bf16, 20, 333, false, kTolBf16},
                        Case{DType::bf16, DType::f32, 3, 5000, false, kTolF32}}) {
    INFO(core::to_string(c.logits) << " rows " << c.rows << " vocab " << c.vocab
                                   << (c.in_place ? " in place" : ""));
    KernelTwin twin;
    core::Rng rng(12);
    const TensorRef logits = twin.random(c.logits, c.rows * c.vocab, rng, 3.0),
                    targets = twin.ids(c.rows, c.vocab, rng);
    const TensorRef dlogits = c.in_place ? logits : twin.alloc(c.dlogits, c.rows * c.vocab);
    const TensorRef loss = twin.alloc(DType::f32, 1);
    const auto call =
        kernels::softmax_cross_entropy(kS, logits, targets, dlogits, loss, c.rows, c.vocab, 1.0 / c.rows);
    twin.require_close(twin.run(call), {dlogits, loss}, c.tol);
  }
  KernelTwin twin;  // a corrupted target: its row and the loss are NaN on both
  core::Rng rng(12);
  const TensorRef logits = twin.random(DType::f32, 4 * 30, rng),
                  targets = twin.put(DType::i32, {1, 30, 2, 29});
  const TensorRef dlogits = twin.alloc(DType::f32, 4 * 30), loss = twin.alloc(DType::f32, 1);
  const auto call = kernels::softmax_cross_entropy(kS, logits, targets, dlogits, loss, 4, 30, 0.25);
  twin.require_close(twin.run(call), {dlogits, loss}, kTolF32);
  REQUIRE(std::isnan(twin.get(loss)[0]));
}

TEST_CASE("gpu adam and sgd steps match the CPU bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType param, grad;
    bool coef;
    int64_t step;
    double weight_decay;
  };
  for (const Case& c :
       {Case{DType::f32, DType::f32, false, 1, 0.0}, Case{DType::f32, DType::f32, true, 7, 0.01},
        Case{DType::bf16, DType::f32, true, 3, 0.1}, Case{DType::bf16, DType::bf16, false, 1000, 0.0}}) {
    INFO(core::to_string(c.param) << " step " << c.step << (c.coef ? " with coef" : ""));
    KernelTwin twin;
    core::Rng rng(13);
    const int64_t n = 10007;
    const TensorRef param = twin.random(c.param, n, rng), grad = twin.random(c.grad, n, rng);
    const TensorRef m = twin.random(c.param, n, rng, 0.1);
    std::vector<double> vs(static_cast<size_t>(n));
    for (double& v : vs) v = 0.01 * std::abs(rng.normal()) + 1e-4;  // second moments are positive
    const TensorRef v = twin.put(c.param, vs);
    std::optional<TensorRef> coef;
    if (c.coef) coef = twin.put(DType::f64, {0.8123});
    const core::kernel::Adam adam{
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = c.weight_decay, .step = c.step};
    twin.require_bitwise(twin.run(kernels::adam(kS, param, grad, m, v, coef, adam)));
    const core::kernel::Sgd sgd{.lr = 0.05, .weight_decay = c.weight_decay};
    twin.require_bitwise(twin.run(kernels::sgd(kS, param, grad, coef, sgd)));
  }
}

// Sums of squares run as a fixed tree over blocks: deterministic, but not the CPU's order.
TEST_CASE("gpu sum of squares matches the CPU bit for bit (core's fixed tree)", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType dt;
    int64_t n;
    bool accumulate;
  };
  // 5'000'011 elements want more first-level blocks than the fixed 1024: the loop strides.
  for (const Case& c : {Case{DType::f32, 5'000'011, false}, Case{DType::bf16, 10007, true},
                        Case{DType::f64, 3, true}, Case{DType::f32, 0, true}}) {
    INFO(core::to_string(c.dt) << " n " << c.n << (c.accumulate ? " accumulating" : ""));
    KernelTwin twin;
    core::Rng rng(14);
    const TensorRef x = twin.random(c.dt, c.n, rng);
    const TensorRef acc = c.accumulate ? twin.put(DType::f64, {2.5}) : twin.alloc(DType::f64, 1);
    twin.require_bitwise(twin.run(kernels::sum_squares(kS, x, acc, c.accumulate)));
  }
}

TEST_CASE("gpu clip coefficient matches the CPU bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    double sumsq, max_norm;
  };
  for (const Case& c : {Case{4.0, 1.0}, Case{2.0, 1.0}, Case{0.25, 1.0}, Case{17.0, 0.0}, Case{1e-20, 3.0}}) {
    INFO("sumsq " << c.sumsq << " max_norm " << c.max_norm);
    KernelTwin twin;
    const TensorRef sumsq = twin.put(DType::f64, {c.sumsq});
    const TensorRef coef = twin.alloc(DType::f64, 1), norm = twin.alloc(DType::f64, 1);
    twin.require_bitwise(twin.run(kernels::clip_coef(kS, sumsq, coef, norm, c.max_norm)));
  }
  // A NaN norm leaves the coefficient at exactly 1. (NaN payloads are the hardware's own, so
  // the norm is compared as "NaN on both", not by its bits.)
  KernelTwin twin;
  const TensorRef sumsq = twin.put(DType::f64, {NAN});
  const TensorRef coef = twin.alloc(DType::f64, 1), norm = twin.alloc(DType::f64, 1);
  twin.require_close(twin.run(kernels::clip_coef(kS, sumsq, coef, norm, 1.0)), {coef, norm}, 0.0);
  REQUIRE(twin.get(coef)[0] == 1.0);
}

// The tolerance kernels still give the same bits on every run: fixed reduction shapes.
TEST_CASE("gpu reductions are deterministic from run to run", "[gpu]") {
  SC_REQUIRE_GPU();
  KernelTwin twin;
  core::Rng rng(15);
  const TensorRef logits = twin.random(DType::f32, 64 * 4099, rng, 3.0), targets = twin.ids(64, 4099, rng);
  const TensorRef dlogits = twin.alloc(DType::f32, 64 * 4099), loss = twin.alloc(DType::f32, 1);
  const TensorRef acc = twin.alloc(DType::f64, 1);
  for (const core::KernelCall& call :
       {kernels::softmax_cross_entropy(kS, logits, targets, dlogits, loss, 64, 4099, 1.0 / 64),
        kernels::sum_squares(kS, logits, acc, false)}) {
    INFO("kernel " << call.name);
    REQUIRE(twin.run_gpu(call) == twin.run_gpu(call));
  }
}

TEST_CASE("gpu launch refuses a call that check_kernel rejects, before enqueueing", "[gpu]") {
  SC_REQUIRE_GPU();
  KernelTwin twin;
  const TensorRef a = twin.alloc(DType::f32, 10), b = twin.alloc(DType::f32, 11);
  REQUIRE_THROWS_AS(twin.launch_unchecked(kernels::add(kS, a, b, a)), gpu::KernelCallError);
  REQUIRE_THROWS_AS(twin.launch_unchecked(kernels::divide(kS, a, a, 0.0)), gpu::KernelCallError);
}

TEST_CASE("gpu scratch grows when a launch needs more than the Blas started with", "[gpu]") {
  SC_REQUIRE_GPU();
  KernelTwin twin(3, /*initial_scratch_bytes=*/64);  // 37 row losses need 148 bytes
  core::Rng rng(16);
  const TensorRef logits = twin.random(DType::f32, 37 * 100, rng), targets = twin.ids(37, 100, rng);
  const TensorRef dlogits = twin.alloc(DType::f32, 37 * 100), loss = twin.alloc(DType::f32, 1);
  const auto call = kernels::softmax_cross_entropy(kS, logits, targets, dlogits, loss, 37, 100, 1.0 / 37);
  twin.require_close(twin.run(call), {dlogits, loss}, kTolF32);
  const TensorRef acc = twin.alloc(DType::f64, 1);  // 1024 partials: 8 KiB
  twin.require_close(twin.run(kernels::sum_squares(kS, logits, acc, false)), {acc}, kTolF64);
}
