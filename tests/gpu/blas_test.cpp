// Gemm through cuBLASLt against the CPU reference, within tolerance: cuBLASLt sums over k in
// its own order (blocked, maybe split), the CPU left to right. Covers all four transpose
// combinations, beta 0 (C poisoned: it must not be read) and beta 1, alpha != 1, f32 and bf16
// operands in every mix, bf16 outputs, k = 0, odd sizes, and aligned and misaligned operands.
#include <catch2/catch.hpp>

#include "tests/gpu/gpu_test_support.hpp"
#include "tests/gpu/kernel_harness.hpp"

using namespace shardcheck;
using namespace shardcheck::gpu_test;

namespace {

// Runs one Gemm on both backends and compares C. f32 products of bf16 values are exact, so
// only a bf16 output (one rounding, which a last-bit difference can flip) needs kTolBf16.
void check_gemm(DType ta, DType tb, DType tc, core::kernel::Gemm g, int64_t pad, uint64_t seed) {
  INFO(core::to_string(ta) << " x " << core::to_string(tb) << " -> " << core::to_string(tc) << ", m " << g.m
                           << " n " << g.n << " k " << g.k << ", trans_a " << g.trans_a << " trans_b "
                           << g.trans_b << ", alpha " << g.alpha << " beta " << g.beta << ", pad " << pad);
  KernelTwin twin(pad);
  core::Rng rng(seed);
  const TensorRef a = twin.random(ta, g.m * g.k, rng), b = twin.random(tb, g.k * g.n, rng);
  const TensorRef c = g.beta != 0.0 ? twin.random(tc, g.m * g.n, rng) : twin.alloc(tc, g.m * g.n);
  twin.require_close(twin.run(core::kernels::gemm(0, a, b, c, g)), {c},
                     tc == DType::bf16 ? kTolBf16 : kTolF32);
}

core::kernel::Gemm shape(int64_t m, int64_t n, int64_t k, bool ta, bool tb, double alpha, double beta) {
  return core::kernel::Gemm{
      .m = m, .n = n, .k = k, .trans_a = ta, .trans_b = tb, .alpha = alpha, .beta = beta};
}

}  // namespace

TEST_CASE("gpu gemm in f32 matches the CPU in all transpose combinations", "[gpu]") {
  SC_REQUIRE_GPU();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (double beta : {0.0, 1.0}) {
        check_gemm(DType::f32, DType::f32, DType::f32, shape(37, 53, 29, ta, tb, 0.75, beta), 3, 1);
        check_gemm(DType::f32, DType::f32, DType::f32, shape(64, 96, 128, ta, tb, 1.0, beta), 0, 2);
      }
    }
  }
}

TEST_CASE("gpu gemm with bf16 operands matches the CPU in all transpose combinations", "[gpu]") {
  SC_REQUIRE_GPU();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (double beta : {0.0, 1.0}) {
        for (DType out : {DType::f32, DType::bf16}) {
          check_gemm(DType::bf16, DType::bf16, out, shape(37, 53, 29, ta, tb, 0.75, beta), 3, 3);
          check_gemm(DType::bf16, DType::bf16, out, shape(64, 96, 128, ta, tb, 1.0, beta), 0, 4);
        }
      }
    }
  }
}

TEST_CASE("gpu gemm with mixed operand dtypes widens them and matches the CPU", "[gpu]") {
  SC_REQUIRE_GPU();
  struct Case {
    DType a, b, c;
  };
  for (const Case& c :
       {Case{DType::bf16, DType::f32, DType::f32}, Case{DType::f32, DType::bf16, DType::bf16},
        Case{DType::f32, DType::f32, DType::bf16}, Case{DType::bf16, DType::f32, DType::bf16}}) {
    for (bool ta : {false, true}) {
      for (double beta : {0.0, 1.0}) {
        check_gemm(c.a, c.b, c.c, shape(33, 21, 45, ta, !ta, -1.25, beta), 3, 5);
      }
    }
  }
}

TEST_CASE("gpu gemm at model-like sizes and vector shapes matches the CPU", "[gpu]") {
  SC_REQUIRE_GPU();
  check_gemm(DType::f32, DType::f32, DType::f32, shape(256, 384, 512, false, true, 1.0, 0.0), 0, 6);
  check_gemm(DType::bf16, DType::bf16, DType::f32, shape(256, 384, 512, true, false, 1.0, 1.0), 0, 7);
  check_gemm(DType::bf16, DType::bf16, DType::bf16, shape(256, 384, 512, false, false, 1.0, 0.0), 0, 8);
  check_gemm(DType::f32, DType::f32, DType::f32, shape(1, 1, 1000, false, false, 1.0, 0.0), 3, 9);
  check_gemm(DType::f32, DType::f32, DType::f32, shape(1, 77, 5, true, true, 2.0, 1.0), 3, 10);
  check_gemm(DType::bf16, DType::bf16, DType::f32, shape(300, 1, 17, false, true, 1.0, 0.0), 3, 11);
}

// With k = 0 there is nothing to sum: C = alpha * 0 (+ beta * C), exactly as on the CPU.
TEST_CASE("gpu gemm with k = 0 matches the CPU bit for bit", "[gpu]") {
  SC_REQUIRE_GPU();
  for (double beta : {0.0, 1.0}) {
    KernelTwin twin;
    core::Rng rng(12);
    const TensorRef a = twin.alloc(DType::f32, 0), b = twin.alloc(DType::bf16, 0);
    const TensorRef c = twin.random(DType::bf16, 7 * 9, rng);
    twin.require_bitwise(twin.run(core::kernels::gemm(0, a, b, c, shape(7, 9, 0, false, false, -1.0, beta))));
  }
}

TEST_CASE("gpu gemm results are deterministic from run to run", "[gpu]") {
  SC_REQUIRE_GPU();
  KernelTwin twin;
  core::Rng rng(13);
  const TensorRef a = twin.random(DType::bf16, 200 * 300, rng), b = twin.random(DType::f32, 300 * 100, rng);
  const TensorRef c = twin.alloc(DType::f32, 200 * 100);
  const auto call = core::kernels::gemm(0, a, b, c, shape(200, 100, 300, false, false, 1.0, 0.0));
  REQUIRE(twin.run_gpu(call) == twin.run_gpu(call));
}
