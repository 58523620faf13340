// Embedding forward and backward, the CPU twin of gpu/embedding.cu. The forward copies weight
// rows by token. The backward sums, for each vocab row, the dout rows of its tokens in the
// chunked order of core/kernels/summation_order.hpp (64-token chunks in token order, then the
// chunk sums in order), in fp32; the GPU kernel keeps that order, bit for bit.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"
#include "core/kernels/summation_order.hpp"

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
  const size_t h = static_cast<size_t>(k.hidden), chunk = static_cast<size_t>(kSumChunkRows);
  Floats dweight(static_cast<size_t>(k.vocab) * h, 0.0f);
  if (std::any_of(tokens.begin(), tokens.end(), [](int32_t t) { return t < 0; })) {
    std::fill(dweight.begin(), dweight.end(), std::numeric_limits<float>::quiet_NaN());  // a corrupted id
    store_floats(mem, c.writes[0], dweight);
    return;
  }
  // A chunk's partial sums, one slot per distinct token of the chunk. A row no token of the
  // chunk touches would add +0.0f, which changes no sum that started from +0.0f: skipped.
  Floats partial(std::min(chunk, tokens.size()) * h);
  std::vector<int32_t> slot_of(static_cast<size_t>(k.vocab), -1), row_of_slot;
  for (size_t c0 = 0; c0 < tokens.size(); c0 += chunk) {
    row_of_slot.clear();
    for (size_t n = c0; n < std::min(tokens.size(), c0 + chunk); ++n) {  // token order
      int32_t& s = slot_of[static_cast<size_t>(tokens[n])];
      if (s < 0) {
        s = static_cast<int32_t>(row_of_slot.size());
        row_of_slot.push_back(tokens[n]);
        std::fill_n(partial.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(s) * h), h, 0.0f);
      }
      float* p = partial.data() + static_cast<size_t>(s) * h;
      const float* d = dout.data() + n * h;
      for (size_t j = 0; j < h; ++j) p[j] += d[j];
    }
    for (size_t s = 0; s < row_of_slot.size(); ++s) {  // then each chunk sum, chunks in order
      float* row = dweight.data() + static_cast<size_t>(row_of_slot[s]) * h;
      const float* p = partial.data() + s * h;
      for (size_t j = 0; j < h; ++j) row[j] += p[j];
      slot_of[static_cast<size_t>(row_of_slot[s])] = -1;
    }
  }
  store_floats(mem, c.writes[0], rounded_if(k.round_bf16, std::move(dweight)));
}

}  // namespace shardcheck::core::cpu
