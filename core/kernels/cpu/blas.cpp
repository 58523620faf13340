// The one matrix product (kernel::Gemm), the CPU twin of gpu/blas.cu. Each element of C sums
// its products over k = 0..K-1 in order, in fp32 from +0.0f, then C = alpha*acc (+ beta*C).
// cuBLASLt sums over k in its own order, so the GPU product is compared within a tolerance.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"
#include "core/kernels/cpu/simd.hpp"

namespace shardcheck::core::cpu {

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

constexpr size_t kColumns = 16;

// Columns [0, kColumns) of R consecutive rows of C (row stride n) from the matching columns
// of B (row stride n), kk > 0: each element sums its own products for k = 0..K-1 in order from
// +0.0f, as the general loop does, with the sums in a fixed-size array the compiler keeps in
// registers. The R rows share each load of B.
template <size_t R>
[[gnu::always_inline]] inline void column_block(const float* arows, const float* b, size_t n, size_t kk,
                                                float alpha, float beta, bool reads_c, float* rows) {
  float acc[R][kColumns];
  for (size_t r = 0; r < R; ++r) {
    const float a0 = arows[r * kk];
    for (size_t j = 0; j < kColumns; ++j) acc[r][j] = 0.0f + a0 * b[j];
  }
  for (size_t p = 1; p < kk; ++p) {
    const float* brow = b + p * n;
    for (size_t r = 0; r < R; ++r) {
      const float ap = arows[r * kk + p];
      for (size_t j = 0; j < kColumns; ++j) acc[r][j] += ap * brow[j];
    }
  }
  for (size_t r = 0; r < R; ++r) {
    float* row = rows + r * n;
    if (reads_c) {
      for (size_t j = 0; j < kColumns; ++j) row[j] = alpha * acc[r][j] + beta * row[j];
    } else {
      for (size_t j = 0; j < kColumns; ++j) row[j] = alpha * acc[r][j];
    }
  }
}

// One row of C, columns [from, n), in the general loop: the sums in acc (length n).
[[gnu::always_inline]] inline void row_tail(const float* arow, const float* b, size_t n, size_t kk,
                                            size_t from, float alpha, float beta, bool reads_c, float* acc,
                                            float* row) {
  // The sum starts from +0.0f: written as the first addition, not as a fill before it.
  if (kk == 0) std::fill(acc + from, acc + n, 0.0f);
  for (size_t p = 0; p < kk; ++p) {
    const float aip = arow[p];
    const float* brow = b + p * n;
    if (p == 0) {
      for (size_t j = from; j < n; ++j) acc[j] = 0.0f + aip * brow[j];
    } else {
      for (size_t j = from; j < n; ++j) acc[j] += aip * brow[j];
    }
  }
  if (reads_c) {
    for (size_t j = from; j < n; ++j) row[j] = alpha * acc[j] + beta * row[j];
  } else {
    for (size_t j = from; j < n; ++j) row[j] = alpha * acc[j];
  }
}

// C (M x N, row-major, holding C on entry when reads_c) = alpha * A B (+ beta * C), A row-major
// M x K, B row-major K x N; acc is scratch of length N. Rows in blocks of R (then of two, then
// one), sixteen columns at a time, their sums held in registers across the whole k loop; the
// columns past the last full block take the general loop. Each sum is a chain of dependent
// additions, so the row block is what keeps the adder busy: R chains (R times the sixteen
// columns' registers) run side by side. Wider registers hold a block in fewer of them, and
// take a larger R.
template <size_t R>
[[gnu::always_inline]] inline void product(const float* a, const float* b, float* out, size_t m, size_t n,
                                           size_t kk, float alpha, float beta, bool reads_c, float* acc) {
  const size_t blocked = kk > 0 ? n / kColumns * kColumns : 0;
  size_t i = 0;
  auto rows = [&]<size_t B>(std::integral_constant<size_t, B>) {
    for (; i + B <= m; i += B) {
      for (size_t j0 = 0; j0 < blocked; j0 += kColumns) {
        column_block<B>(a + i * kk, b + j0, n, kk, alpha, beta, reads_c, out + i * n + j0);
      }
      if (blocked == n) continue;
      for (size_t r = i; r < i + B; ++r)
        row_tail(a + r * kk, b, n, kk, blocked, alpha, beta, reads_c, acc, out + r * n);
    }
  };
  rows(std::integral_constant<size_t, R>{});
  if constexpr (R > 2) rows(std::integral_constant<size_t, 2>{});
  rows(std::integral_constant<size_t, 1>{});
}

// The same source once per vector width (simd.hpp): baseline x86-64 (SSE2, four lanes), AVX2
// (eight) and AVX-512F (sixteen, a column block in one register). None of them contracts a
// product and a sum into an FMA (the build forbids it), so all compute the same roundings in
// the same order and agree bit for bit; only the lane count differs.
// Row blocks per width: sixteen columns are four registers of SSE2 (two rows fill half of its
// sixteen), two of AVX2 (four rows: eight of sixteen), one of AVX-512 (eight rows: eight of 32).
void run_product_baseline(const float* a, const float* b, float* out, size_t m, size_t n, size_t kk,
                          float alpha, float beta, bool reads_c, float* acc) {
  product<2>(a, b, out, m, n, kk, alpha, beta, reads_c, acc);
}
SHARDCHECK_SIMD_TARGET_AVX2 void run_product_avx2(const float* a, const float* b, float* out, size_t m,
                                                  size_t n, size_t kk, float alpha, float beta, bool reads_c,
                                                  float* acc) {
  product<4>(a, b, out, m, n, kk, alpha, beta, reads_c, acc);
}
SHARDCHECK_SIMD_TARGET_AVX512 void run_product_avx512(const float* a, const float* b, float* out, size_t m,
                                                      size_t n, size_t kk, float alpha, float beta,
                                                      bool reads_c, float* acc) {
  product<8>(a, b, out, m, n, kk, alpha, beta, reads_c, acc);
}
void run_product(const float* a, const float* b, float* out, size_t m, size_t n, size_t kk, float alpha,
                 float beta, bool reads_c, float* acc) {
  switch (simd_level()) {
    case SimdLevel::avx512:
      return run_product_avx512(a, b, out, m, n, kk, alpha, beta, reads_c, acc);
    case SimdLevel::avx2:
      return run_product_avx2(a, b, out, m, n, kk, alpha, beta, reads_c, acc);
    case SimdLevel::baseline:
      break;
  }
  run_product_baseline(a, b, out, m, n, kk, alpha, beta, reads_c, acc);
}

bool runs(SimdLevel l) {
  for (SimdLevel x : simd_levels()) {
    if (x == l) return true;
  }
  return false;
}

}  // namespace

std::vector<GemmPath> gemm_paths() {
  return {{"baseline", true, run_product_baseline},
          {"avx2", runs(SimdLevel::avx2), run_product_avx2},
          {"avx512", runs(SimdLevel::avx512), run_product_avx512}};
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

// The hot kernel. Operands are laid out as row-major op(A) (M x K) and op(B) (K x N) in fp32,
// so the inner loop has no dtype or layout dispatch: an f32 operand without a transpose is read
// where it lies, any other is copied (widened, transposed) first. C is computed where it lies
// too when it is f32 and shares no byte with an operand read in place; otherwise into a copy,
// stored at the end. For each row of C, the loop runs k outermost and j innermost: each element
// still sums its own products for k = 0..K-1 in order, starting from +0.0f, but the j loop
// vectorizes (product above, as wide as the processor allows). Then C = alpha * acc (+ beta *
// C, reading C only when beta != 0), in fp32. Where the bytes come from changes no value.
void execute(const KernelCall& c, const kernel::Gemm& k, MemoryView& mem) {
  const size_t m = static_cast<size_t>(k.m), n = static_cast<size_t>(k.n), kk = static_cast<size_t>(k.k);
  const float* a_direct = k.trans_a ? nullptr : f32_in_place(mem, c.reads[0]);
  const float* b_direct = k.trans_b ? nullptr : f32_in_place(mem, c.reads[1]);
  std::optional<Floats> a_copy, b_copy;
  if (!a_direct) a_copy.emplace(load_op(mem, c.reads[0], k.m, k.k, k.trans_a));
  if (!b_direct) b_copy.emplace(load_op(mem, c.reads[1], k.k, k.n, k.trans_b));
  const float* a = a_direct ? a_direct : a_copy->data();
  const float* b = b_direct ? b_direct : b_copy->data();
  const bool reads_c = k.beta != 0.0;
  const float alpha = static_cast<float>(k.alpha), beta = static_cast<float>(k.beta);
  Floats acc(n);
  const TensorRef& cw = c.writes[0];
  const bool c_direct = f32_in_place(mem, cw) != nullptr && !(a_direct && overlaps(cw, c.reads[0])) &&
                        !(b_direct && overlaps(cw, c.reads[1]));
  if (c_direct) {  // holds C on entry when reads_c: reads[2] is writes[0] (check)
    float* out = reinterpret_cast<float*>(mem.data(cw));
    run_product(a, b, out, m, n, kk, alpha, beta, reads_c, acc.data());
    return;
  }
  Floats out = reads_c ? load_floats(mem, c.reads[2]) : Floats(m * n);
  run_product(a, b, out.data(), m, n, kk, alpha, beta, reads_c, acc.data());
  store_floats(mem, cw, out);
}

}  // namespace shardcheck::core::cpu
