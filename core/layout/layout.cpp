// GlobalLayout construction, exactly as docs/semantics.md §2 steps 1-5, plus local ranges and
// per-tensor row ownership.
#include "core/layout/layout.hpp"

#include <algorithm>
#include <charconv>
#include <numeric>

namespace shardcheck::core {

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// State of one layout construction; each method is one step of the semantics.md algorithm.
class LayoutBuilder {
 public:
  explicit LayoutBuilder(std::vector<TensorSlot>& t, int64_t chunk) : t_(t), chunk_(chunk) {
    placed_.assign(t.size(), false);
    for (size_t i = 0; i < t.size(); ++i) (t[i].fragment ? fragments_ : regular_).push_back(i);
    // Fragments by numel, largest first; stable so equal sizes keep their original order.
    std::stable_sort(fragments_.begin(), fragments_.end(),
                     [&](size_t a, size_t b) { return t_[a].numel > t_[b].numel; });
  }

  int64_t run() {
    for (size_t k = 0; k < regular_.size(); ++k) {
      if (!placed_[regular_[k]]) place_regular(k);
    }
    for (size_t f : fragments_) {  // step 4: the tail
      if (placed_[f]) continue;
      put(f, round_up(next_, t_[f].row));
      next_ = t_[f].offset + t_[f].numel;
    }
    return next_;
  }

 private:
  void put(size_t i, int64_t offset) {
    t_[i].offset = offset;
    placed_[i] = true;
  }

  // Step 3 for the k-th regular tensor.
  void place_regular(size_t k) {
    const size_t i = regular_[k];
    const int64_t n = t_[i].numel;
    put(i, next_);
    if (n % chunk_ == 0) {
      next_ += n;
      return;
    }
    const int64_t gap_start = next_ + n;
    next_ += round_up(n, chunk_);
    int64_t gap_end = next_;
    const int64_t rem = n % chunk_;
    for (size_t m = k + 1; m < regular_.size(); ++m) {
      const size_t j = regular_[m];
      const int64_t crem = t_[j].numel % chunk_;
      if (placed_[j] || crem == 0 || rem + crem > chunk_) continue;
      put(j, next_ - crem);  // its remainder closes the current chunk
      gap_end = t_[j].offset;
      next_ += t_[j].numel - crem;
      break;
    }
    fill_gap(gap_start, gap_end);
  }

  void fill_gap(int64_t begin, int64_t end) {
    int64_t cursor = begin;
    for (size_t f : fragments_) {
      if (placed_[f]) continue;
      const int64_t at = round_up(cursor, t_[f].row);
      if (at + t_[f].numel > end) continue;
      put(f, at);
      cursor = at + t_[f].numel;
    }
  }

  std::vector<TensorSlot>& t_;
  int64_t chunk_;
  int64_t next_ = 0;
  std::vector<bool> placed_;
  std::vector<size_t> regular_, fragments_;
};

}  // namespace

Expected<Shape> parse_shape(std::string_view text) {
  text = trim(text);
  if (text.empty()) return fail("empty shape: a 0-D tensor has no rows (write e.g. 3 or 5x4)");
  Shape shape;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t x = text.find('x', pos);
    if (x == std::string_view::npos) x = text.size();
    std::string_view dim = trim(text.substr(pos, x - pos));
    int64_t v = 0;
    auto [end, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), v);
    if (dim.empty() || ec != std::errc() || end != dim.data() + dim.size()) {
      return fail("shape '", std::string(text), "': dimension '", std::string(dim),
                  "' is not a positive integer");
    }
    if (v <= 0) {
      return fail("shape '", std::string(text), "': dimension ", v, " must be at least 1");
    }
    shape.push_back(v);
    pos = x + 1;
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (n > GlobalLayout::kMaxElements / d) {
      return fail("shape '", std::string(text), "' has more than 2^40 elements");
    }
    n *= d;
  }
  return shape;
}

Expected<std::vector<Shape>> parse_shapes(std::string_view text) {
  std::vector<Shape> shapes;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    auto s = parse_shape(text.substr(pos, comma - pos));
    if (!s) return fail("tensor ", shapes.size(), ": ", s.error().message());
    shapes.push_back(std::move(s).value());
    pos = comma + 1;
  }
  return shapes;
}

std::string to_string(const Shape& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Expected<GlobalLayout> GlobalLayout::create(std::vector<Shape> shapes, int ranks) {
  if (ranks < 1 || ranks > kMaxRanks) {
    return fail("ranks must be between 1 and ", kMaxRanks, "; got ", ranks);
  }
  if (shapes.empty()) return fail("a layout needs at least one tensor");
  if (static_cast<int64_t>(shapes.size()) > kMaxTensors) return fail("more than ", kMaxTensors, " tensors");
  GlobalLayout l;
  l.ranks_ = ranks;
  int64_t total = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    if (s.empty()) return fail("tensor ", i, " is 0-D; every tensor needs at least one dimension");
    for (int64_t d : s) {
      if (d < 1) return fail("tensor ", i, " (", to_string(s), ") has a dimension < 1");
    }
    TensorSlot t;
    t.shape = s;
    t.numel = numel(s);
    t.row = t.numel / s[0];
    total += t.numel;
    if (total > kMaxElements) return fail("the tensors hold more than 2^40 elements");
    // lcm(a, b) = a / gcd(a, b) * b, checked before the product: two rows just under 2^40
    // have an lcm near 2^80, which std::lcm wrapped into a negative chunk.
    const int64_t part = l.chunk_ / std::gcd(l.chunk_, t.row);
    if (part > kMaxElements / t.row) {
      return fail("the chunk, the lcm of the row sizes (", l.chunk_, " and tensor ", i, "'s ", t.row,
                  "), exceeds 2^40 elements");
    }
    l.chunk_ = part * t.row;
    l.tensors_.push_back(std::move(t));
  }
  for (TensorSlot& t : l.tensors_) t.fragment = t.numel < l.chunk_;
  l.end_ = LayoutBuilder(l.tensors_, l.chunk_).run();
  const int64_t unit = l.chunk_ * ranks;
  if (l.end_ > kMaxElements || unit > kMaxElements) return fail("the layout exceeds 2^40 elements");
  l.size_ = round_up(l.end_, unit);
  l.check_invariants();
  return l;
}

void GlobalLayout::check_invariants() const {
  // The impossible, asserted: a wrapped product shows up here as an internal error (exit 3),
  // never as a layout printed with a negative chunk and exit 0.
  const bool sized = chunk_ >= 1 && end_ >= 0 && size_ >= end_ && size_ % (chunk_ * ranks_) == 0;
  if (!sized)
    throw InternalError("GlobalLayout: chunk " + std::to_string(chunk_) + ", end " + std::to_string(end_) +
                        ", size " + std::to_string(size_) + " over " + std::to_string(ranks_) + " ranks");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorSlot& t = tensors_[i];
    if (t.row < 1 || chunk_ % t.row != 0 || t.offset < 0 || t.offset % t.row != 0 ||
        t.offset + t.numel > end_) {
      throw InternalError("GlobalLayout: tensor " + std::to_string(i) + " at " + std::to_string(t.offset) +
                          " with rows of " + std::to_string(t.row) + " does not fit chunk " +
                          std::to_string(chunk_));
    }
  }
}

std::vector<ElementRange> GlobalLayout::unused() const {
  std::vector<ElementRange> used;
  for (const TensorSlot& t : tensors_) used.push_back({t.offset, t.offset + t.numel});
  std::sort(used.begin(), used.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  std::vector<ElementRange> out;
  int64_t cursor = 0;
  for (const ElementRange& u : used) {
    if (u.begin > cursor) out.push_back({cursor, u.begin});
    cursor = std::max(cursor, u.end);
  }
  if (size_ > cursor) out.push_back({cursor, size_});
  return out;
}

int64_t GlobalLayout::gap_elements() const {
  int64_t n = 0;
  for (const ElementRange& r : unused()) n += std::min(r.end, end_) - std::min(r.begin, end_);
  return n;
}

bool operator==(const GlobalLayout& a, const GlobalLayout& b) {
  if (a.ranks_ != b.ranks_ || a.size_ != b.size_ || a.chunk_ != b.chunk_) return false;
  if (a.tensors_.size() != b.tensors_.size()) return false;
  for (size_t i = 0; i < a.tensors_.size(); ++i) {
    if (a.tensors_[i].shape != b.tensors_[i].shape || a.tensors_[i].offset != b.tensors_[i].offset) {
      return false;
    }
  }
  return true;
}

LocalRange local_range(const GlobalLayout& layout, std::span<const Placement> placements,
                       std::span<const int> axis_sizes, std::span<const int> coords) {
  if (placements.size() != axis_sizes.size() || coords.size() != axis_sizes.size()) {
    throw InternalError("local_range: one placement, size and coordinate per axis");
  }
  LocalRange r{0, layout.size()};
  for (int a = static_cast<int>(placements.size()) - 1; a >= 0; --a) {
    if (!placements[a].is_flat()) continue;
    r.numel /= axis_sizes[a];
    r.offset += coords[a] * r.numel;
  }
  return r;
}

std::vector<OwnedRows> owned_rows(const GlobalLayout& layout, LocalRange range) {
  std::vector<OwnedRows> out;
  const int64_t lo = range.offset, hi = range.offset + range.numel;
  for (int i = 0; i < layout.num_tensors(); ++i) {
    const TensorSlot& t = layout.tensor(i);
    const int64_t b = std::max(lo, t.offset), e = std::min(hi, t.offset + t.numel);
    if (b >= e) continue;
    // Shard boundaries are multiples of chunk, hence of every row: ownership is whole rows.
    if ((b - t.offset) % t.row != 0 || (e - b) % t.row != 0) {
      throw InternalError("owned_rows: a shard boundary splits a row of tensor " + std::to_string(i));
    }
    out.push_back({i, (b - t.offset) / t.row, (e - b) / t.row, b - lo});
  }
  return out;
}

}  // namespace shardcheck::core
