// Softmax cross-entropy, the CPU twin of gpu/softmax.cu. Per row, the sum of exp(l - max) runs
// over v = 0..V-1 in order; the loss sums the row losses in row order and divides by N. The GPU
// sums a row as a fixed tree with CUDA's expf and logf, so the two agree within a tolerance.
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

std::string check(const KernelCall& c, const kernel::SoftmaxCrossEntropy& k) {
  ArgCheck a(c);
  const int64_t nv = numel_of({k.rows, k.vocab});
  a.counts(2, 2).require(k.rows > 0 && k.vocab > 0 && nv > 0, "rows and vocab must be positive");
  a.read(0, "logits", Kind::floating, nv, "N x V").read(1, "targets", Kind::i32, k.rows, "N");
  a.write(0, "dlogits", Kind::floating, nv, "N x V").write(1, "loss", Kind::f32, 1, "a scalar");
  return a.message();
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

}  // namespace shardcheck::core::cpu
