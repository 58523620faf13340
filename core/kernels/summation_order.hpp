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
//
// Sums of squares (the gradient norm) are one long sum in f64, not columns: they follow the
// fixed tree of fixed_tree_sum below, which the GPU's sum_squares kernels run in parallel.
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

// The sum of squares' fixed tree, a function of n alone. G = min(ceil(n / kTreePerBlock),
// kTreeBlocksMax) blocks of kTreeBlock lanes; lane t of block b adds the terms i = b*kTreeBlock
// + t, then every G*kTreeBlock-th after it, in order from 0.0; each block adds its lanes with a
// halving tree (stride kTreeBlock/2, then half that, ...: v[t] += v[t + stride]); then lane t
// of one final block adds the block sums t, t + kTreeBlock, ... in order, and a halving tree
// gives the sum. gpu/reductions.cu runs exactly these additions.
inline constexpr int64_t kTreeBlock = 256;
inline constexpr int64_t kTreePerBlock = kTreeBlock * 16;
inline constexpr int64_t kTreeBlocksMax = 1024;

inline int64_t fixed_tree_blocks(int64_t n) {
  const int64_t wanted = (n + kTreePerBlock - 1) / kTreePerBlock;
  return wanted < kTreeBlocksMax ? wanted : kTreeBlocksMax;
}

// term(i) is the i-th addend (a square, for the norm).
template <class Term>
double fixed_tree_sum(int64_t n, Term term) {
  const auto halving_tree = [](double* v) {
    for (int64_t stride = kTreeBlock / 2; stride > 0; stride /= 2) {
      for (int64_t t = 0; t < stride; ++t) v[t] += v[t + stride];
    }
    return v[0];
  };
  const int64_t blocks = fixed_tree_blocks(n), lanes = blocks * kTreeBlock;
  std::vector<double> lane(static_cast<size_t>(lanes), 0.0);
  for (int64_t i = 0; i < n; ++i) lane[static_cast<size_t>(i % lanes)] += term(i);  // each lane in order
  std::vector<double> final_lanes(static_cast<size_t>(kTreeBlock), 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    final_lanes[static_cast<size_t>(b % kTreeBlock)] += halving_tree(lane.data() + b * kTreeBlock);
  }
  return halving_tree(final_lanes.data());
}

}  // namespace shardcheck::core
