// The one summation order of every column sum (LayerNorm's dgamma and dbeta, bias gradients,
// the embedding gradient's sum over tokens): rows are split into chunks of kSumChunkRows,
// each chunk is summed in row order from +0.0f, then the chunk sums are added in chunk order
// from +0.0f. The CPU kernels and the GPU kernels both follow it, so their results are equal
// bit for bit, while the GPU sums the chunks of a column in parallel.
//
//   ChunkedColumnSum sums(cols);
//   for (n...) { for (j...) sums.add(j, v[n][j]); sums.end_row(); }
//   std::vector<float> out = sums.finish();
//
// A column of at most kSumChunkRows rows sums exactly as in row order (one chunk, and +0.0f
// plus a sum that started from +0.0f changes nothing); longer columns round differently.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace shardcheck::core {

// A constant, never a property of the device: the order, and so the bits, must not depend on
// where a sum runs. 64 rows give a GPU rows/64 independent sums per column.
inline constexpr int64_t kSumChunkRows = 64;

// Column sums of a matrix given one row at a time, in the order above.
class ChunkedColumnSum {
 public:
  explicit ChunkedColumnSum(size_t cols) : total_(cols, 0.0f), partial_(cols, 0.0f) {}

  void add(size_t col, float v) { partial_[col] += v; }
  void end_row() {
    if (++rows_in_chunk_ == kSumChunkRows) fold();
  }
  std::vector<float> finish() {
    if (rows_in_chunk_ > 0) fold();
    return std::move(total_);
  }

 private:
  void fold() {
    for (size_t j = 0; j < total_.size(); ++j) {
      total_[j] += partial_[j];
      partial_[j] = 0.0f;
    }
    rows_in_chunk_ = 0;
  }

  std::vector<float> total_, partial_;
  int64_t rows_in_chunk_ = 0;
};

// One column (a sequence) summed in the same order.
inline float chunked_sum(std::span<const float> v) {
  float total = 0.0f;
  for (size_t c = 0; c < v.size(); c += static_cast<size_t>(kSumChunkRows)) {
    float partial = 0.0f;
    const size_t end = std::min(v.size(), c + static_cast<size_t>(kSumChunkRows));
    for (size_t n = c; n < end; ++n) partial += v[n];
    total += partial;
  }
  return total;
}

}  // namespace shardcheck::core
