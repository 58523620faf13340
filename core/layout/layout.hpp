// The global layout of a parameter group's flat buffer (docs/semantics.md §2): where each tensor
// lives, chosen so that every rank-shard boundary falls on a row boundary of every tensor.
// It depends only on the shapes and the number of ranks D, never on dtype or placement.
//   GlobalLayout l = GlobalLayout::create({{5, 4}, {2, 6}, {3}}, 2).value();
//   l.tensor(1).offset == 24;  l.size() == 48;
//   LocalRange r = local_range(l, {Placement::flat()}, {2}, {1});   // {24, 24}
//   owned_rows(l, r)  ->  [{tensor 1, rows 0..2}]
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.hpp"
#include "core/layout/placement.hpp"

namespace shardcheck::core {

using Shape = std::vector<int64_t>;

Expected<Shape> parse_shape(std::string_view text);                // "5x4" -> {5, 4}
Expected<std::vector<Shape>> parse_shapes(std::string_view text);  // "5x4,2x6,3"
std::string to_string(const Shape& shape);                         // "5x4"
int64_t numel(const Shape& shape);

struct TensorSlot {
  Shape shape;
  int64_t offset = 0;  // in elements from the start of the group buffer
  int64_t numel = 0;
  int64_t row = 1;        // elements per dim-0 row: product of the dims after dim 0
  bool fragment = false;  // numel < chunk: placed into a gap or at the tail
};

struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
  int64_t size() const { return end - begin; }
  friend bool operator==(const ElementRange&, const ElementRange&) = default;
};

class GlobalLayout {
 public:
  // Limits that keep every offset computation far from int64 overflow.
  static constexpr int64_t kMaxElements = int64_t{1} << 40;
  static constexpr int kMaxRanks = 4096;
  static constexpr int kMaxTensors = 1 << 16;

  static Expected<GlobalLayout> create(std::vector<Shape> shapes, int ranks);

  int ranks() const { return ranks_; }
  int64_t size() const { return size_; }    // elements, a multiple of chunk * ranks
  int64_t chunk() const { return chunk_; }  // lcm of all rows
  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  const TensorSlot& tensor(int i) const { return tensors_.at(i); }
  const std::vector<TensorSlot>& tensors() const { return tensors_; }

  // Elements no tensor occupies, in ascending order: gaps between tensors and the padding
  // at the end. Nothing may read them into a result.
  std::vector<ElementRange> unused() const;
  int64_t padding_elements() const { return size_ - end_; }  // after the last tensor
  int64_t gap_elements() const;                              // unused before the end

  friend bool operator==(const GlobalLayout&, const GlobalLayout&);

 private:
  // Throws InternalError unless every tensor sits on a row boundary inside the buffer, every
  // row divides the chunk, and the size is a whole number of chunks per rank.
  void check_invariants() const;

  int ranks_ = 1;
  int64_t size_ = 0;
  int64_t chunk_ = 1;
  int64_t end_ = 0;  // one past the last tensor element
  std::vector<TensorSlot> tensors_;
};

// The part of the group buffer a rank holds locally.
struct LocalRange {
  int64_t offset = 0;
  int64_t numel = 0;
  friend bool operator==(const LocalRange&, const LocalRange&) = default;
};

// Start from the whole buffer and walk the axes from last to first; each Flat axis of size n
// at coordinate c divides the range into n pieces and keeps piece c.
LocalRange local_range(const GlobalLayout& layout, std::span<const Placement> placements,
                       std::span<const int> axis_sizes, std::span<const int> coords);

// Whole rows of one tensor that lie inside a local range.
struct OwnedRows {
  int tensor = 0;
  int64_t first_row = 0;
  int64_t rows = 0;
  int64_t local_offset = 0;  // element offset of the first owned row inside the local buffer
  friend bool operator==(const OwnedRows&, const OwnedRows&) = default;
};

// Rows of every tensor inside `range`, in tensor order. Empty when the rank holds none.
std::vector<OwnedRows> owned_rows(const GlobalLayout& layout, LocalRange range);

}  // namespace shardcheck::core
