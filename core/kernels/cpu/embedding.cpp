// Embedding forward and backward, the CPU twin of gpu/embedding.cu. The forward copies weight
// rows by token. The backward starts dweight at 0 and adds dout[n] into row tokens[n] for
// n = 0..N-1 in token order, in fp32; the GPU kernel keeps that order, bit for bit.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"

namespace shardcheck::core::cpu {

std::string check(const KernelCall& c, const kernel::EmbeddingForward& k) {
  ArgCheck a(c);
  const int64_t vh = numel_of({k.vocab, k.hidden});
  a.counts(2, 1).require(k.vocab > 0 && k.hidden > 0 && vh > 0, "vocab and hidden must be positive");
  const int64_t n = len(c.reads, 0);
  a.read(0, "tokens", Kind::i32, n, "N").read(1, "weight", Kind::floating, vh, "V x H");
  return a.write(0, "out", Kind::floating, numel_of({n, k.hidden}), "N x H").message();
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

std::string check(const KernelCall& c, const kernel::EmbeddingBackward& k) {
  ArgCheck a(c);
  const int64_t vh = numel_of({k.vocab, k.hidden});
  a.counts(2, 1).require(k.vocab > 0 && k.hidden > 0 && vh > 0, "vocab and hidden must be positive");
  const int64_t n = len(c.reads, 0);
  a.read(0, "tokens", Kind::i32, n, "N").read(1, "dout", Kind::floating, numel_of({n, k.hidden}), "N x H");
  return a.write(0, "dweight", Kind::floating, vh, "V x H").message();
}

void execute(const KernelCall& c, const kernel::EmbeddingBackward& k, MemoryView& mem) {
  const std::vector<int32_t> tokens = load_ids(mem, c, 0, k.vocab);
  const Floats dout = load_floats(mem, c.reads[1]);
  const size_t h = static_cast<size_t>(k.hidden);
  Floats dweight(static_cast<size_t>(k.vocab) * h, 0.0f);
  for (size_t n = 0; n < tokens.size(); ++n) {  // token order: the one summation order
    if (tokens[n] < 0) {                        // a corrupted id poisons the whole gradient
      std::fill(dweight.begin(), dweight.end(), std::numeric_limits<float>::quiet_NaN());
      break;
    }
    float* row = dweight.data() + static_cast<size_t>(tokens[n]) * h;
    const float* d = dout.data() + n * h;
    for (size_t j = 0; j < h; ++j) row[j] += d[j];
  }
  store_floats(mem, c.writes[0], dweight);
}

}  // namespace shardcheck::core::cpu
