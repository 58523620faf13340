// Simulated segments: host memory behind simulated device addresses.
#include "sim/heap.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace shardcheck::sim {

Heap::Heap(core::Allocator model, core::PoolReuse reuse, int64_t* world_bytes, int64_t world_limit,
           bool values, int color, core::PoolGeometry geometry)
    : world_bytes_(world_bytes),
      world_limit_(world_limit),
      values_(values),
      color_(static_cast<uint64_t>(color)),
      pool_(
          model == core::Allocator::caching, reuse, [this](uint64_t size) { return new_segment(size); },
          geometry),
      model_(model) {}

std::optional<Heap::Allocation> Heap::place(uint64_t at, uint64_t bytes, int stream, Legal legal) {
  if (values_ || at == 0 || at >= kMaxPlaced) return std::nullopt;
  const uint64_t lo = kPlaced + at, hi = lo + std::max<uint64_t>(bytes, 1);
  auto first = placed_.lower_bound(lo);
  if (first != placed_.begin() && std::prev(first)->second.addr + std::prev(first)->second.size > lo) --first;
  auto last = first;
  for (; last != placed_.end() && last->first < hi; ++last) {
    const Block& b = last->second;
    if (!b.free) return std::nullopt;
    if (model_ == core::Allocator::caching && b.stream != stream) return std::nullopt;
  }
  Allocation a{lo, false, {}, 0};
  uint64_t latest = 0;
  std::vector<Block> rest;  // the parts of overlapped freed blocks outside [lo, hi): still free
  for (auto it = first; it != last; ++it) {
    Block& b = it->second;
    placed_held_.erase(b.addr);
    a.reused = true;
    a.waited.insert(a.waited.end(), b.pending.begin(), b.pending.end());
    if (b.freed_order >= latest) latest = b.freed_order, a.free_op = b.free_op;
    if (b.addr < lo) rest.push_back(b), rest.back().size = lo - b.addr;
    if (b.addr + b.size > hi)
      rest.push_back(b), rest.back().addr = hi, rest.back().size = b.addr + b.size - hi;
  }
  placed_.erase(first, last);
  for (Block& b : rest) {
    if (!b.pending.empty()) placed_held_.insert(b.addr);
    placed_.emplace(b.addr, std::move(b));
  }
  for (uint64_t h : placed_held_) {
    const Block& b = placed_.at(h);
    if (b.stream == stream && b.size >= bytes) legal(b, stream);
  }
  Block taken;
  taken.addr = lo;
  taken.size = hi - lo;
  taken.stream = stream;
  placed_.emplace(lo, std::move(taken));
  return a;
}

void Heap::release(uint64_t addr, std::vector<uint64_t> pending, uint64_t free_op) {
  if (addr < kPlaced) return pool_.release(addr, std::move(pending), free_op);
  Block& b = placed_.at(addr);
  b.free = true;
  b.freed_order = ++placed_frees_;
  b.pending = std::move(pending);
  b.free_op = free_op;
  if (!b.pending.empty()) placed_held_.insert(addr);
}

uint64_t Heap::new_segment(uint64_t size) {
  if (*world_bytes_ + static_cast<int64_t>(size) > world_limit_) {
    throw ResourceError(
        "simulated device memory exhausted: " + std::to_string(*world_bytes_ + static_cast<int64_t>(size)) +
        " bytes would exceed the limit of " + std::to_string(world_limit_));
  }
  *world_bytes_ += static_cast<int64_t>(size);
  Segment s;
  s.size = size;
  // Never-written device memory reads as NaN in every float dtype: set by initialize().
  if (values_) {
    const uint64_t stagger = stagger_bytes(color_, segments_.size());
    s.storage = std::make_unique_for_overwrite<std::byte[]>(size + stagger);
    s.data = s.storage.get() + stagger;
  }
  const uint64_t base = next_addr_;
  segments_.emplace(base, std::move(s));
  next_addr_ += size + core::BlockPool::kRound;  // a guard gap: segments never look contiguous
  return base;
}

void Heap::initialize(uint64_t addr, uint64_t size) {
  auto it = segments_.upper_bound(addr);
  if (it == segments_.begin()) throw std::logic_error("a block outside simulated memory");
  --it;
  Segment& s = it->second;
  const uint64_t end = addr - it->first + size;
  if (end > s.size) throw std::logic_error("a block past the end of its segment");
  // Every byte below the mark is set; the block may start above it (a split left a free
  // block between), and the bytes between are set too, so the mark stays one number.
  if (end <= s.initialized) return;
  std::memset(s.data + s.initialized, 0xff, end - s.initialized);
  s.initialized = end;
}

std::byte* Heap::bytes(uint64_t addr) {
  auto it = segments_.upper_bound(addr);
  if (it == segments_.begin()) throw std::logic_error("address outside simulated memory");
  --it;
  if (addr >= it->first + it->second.size) throw std::logic_error("address outside simulated memory");
  if (!values_) throw std::logic_error("a shadow-only run has no bytes behind simulated memory");
  return it->second.data + (addr - it->first);
}

}  // namespace shardcheck::sim
