// The one matrix product (kernel::Gemm), the CPU twin of gpu/blas.cu. Each element of C sums
// its products over k = 0..K-1 in order, in fp32 from +0.0f, then C = alpha*acc (+ beta*C).
// cuBLASLt sums over k in its own order, so the GPU product is compared within a tolerance.
#include <algorithm>
#include <string>

#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"

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

// Columns [0, kColumns) of one row of C from the matching columns of B (row stride n), kk > 0:
// each element sums its own products for k = 0..K-1 in order from +0.0f, as the general loop
// does, with the sums in a fixed-size array the compiler keeps in registers.
void column_block(const float* arow, const float* b, size_t n, size_t kk, float alpha, float beta,
                  bool reads_c, float* row) {
  float acc[kColumns];
  const float a0 = arow[0];
  for (size_t j = 0; j < kColumns; ++j) acc[j] = 0.0f + a0 * b[j];
  for (size_t p = 1; p < kk; ++p) {
    const float ap = arow[p];
    const float* brow = b + p * n;
    for (size_t j = 0; j < kColumns; ++j) acc[j] += ap * brow[j];
  }
  if (reads_c) {
    for (size_t j = 0; j < kColumns; ++j) row[j] = alpha * acc[j] + beta * row[j];
  } else {
    for (size_t j = 0; j < kColumns; ++j) row[j] = alpha * acc[j];
  }
}

}  // namespace

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
    // Sixteen columns at a time, their sums held in registers across the whole k loop; the
    // columns past the last full block take the general loop below.
    const size_t blocked = kk > 0 ? n / kColumns * kColumns : 0;
    for (size_t j0 = 0; j0 < blocked; j0 += kColumns) {
      column_block(a.data() + i * kk, b.data() + j0, n, kk, alpha, beta, reads_c, out.data() + i * n + j0);
    }
    if (blocked == n) continue;
    float* accp = acc.data();
    // The sum starts from +0.0f: written as the first addition, not as a fill before it.
    if (kk == 0) std::fill(acc.begin(), acc.end(), 0.0f);
    for (size_t p = 0; p < kk; ++p) {
      const float aip = a[i * kk + p];
      const float* brow = b.data() + p * n;
      if (p == 0) {
        for (size_t j = blocked; j < n; ++j) accp[j] = 0.0f + aip * brow[j];
      } else {
        for (size_t j = blocked; j < n; ++j) accp[j] += aip * brow[j];
      }
    }
    float* row = out.data() + i * n;
    if (reads_c) {
      for (size_t j = blocked; j < n; ++j) row[j] = alpha * accp[j] + beta * row[j];
    } else {
      for (size_t j = blocked; j < n; ++j) row[j] = alpha * accp[j];
    }
  }
  store_floats(mem, c.writes[0], out);
}

}  // namespace shardcheck::core::cpu
