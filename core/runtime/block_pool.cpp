// Block selection, splitting and merging.
#include "core/runtime/block_pool.hpp"

#include <utility>

namespace shardcheck::core {

namespace {
uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }
}  // namespace

// PyTorch's CUDACachingAllocator constants (c10/cuda/CUDACachingAllocator.cpp).
constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kSmallSize = 1 * kMiB;       // the largest request of the small pool
constexpr uint64_t kSmallBuffer = 2 * kMiB;     // a small pool segment
constexpr uint64_t kLargeBuffer = 20 * kMiB;    // a large pool segment
constexpr uint64_t kMinLargeAlloc = 10 * kMiB;  // from here a request gets its own segment
constexpr uint64_t kRoundLarge = 2 * kMiB;      // ... in these steps

bool BlockPool::large(uint64_t size) const { return geometry_ == PoolGeometry::torch && size > kSmallSize; }

uint64_t BlockPool::segment_size(uint64_t size) const {
  if (geometry_ == PoolGeometry::simple) return round_up(size, kSegment);
  if (size <= kSmallSize) return kSmallBuffer;
  return size < kMinLargeAlloc ? kLargeBuffer : round_up(size, kRoundLarge);
}

PoolBlock* BlockPool::pick(uint64_t size, int stream, Legal legal) {
  if (reuse_ == PoolReuse::best_fit) return pick_best_fit(size, stream, legal);
  PoolBlock* best = nullptr;
  const bool from_large = large(size);
  for (auto& [addr, b] : blocks_) {
    if (!b.free || b.size < size || b.large != from_large) continue;
    if (!legal(b, stream)) continue;
    if (!best) {
      best = &b;
    } else if (reuse_ == PoolReuse::earliest) {
      if (b.freed_order > best->freed_order) best = &b;
    } else if (b.size < best->size) {
      best = &b;  // ties keep the lower address (map order)
    }
  }
  return best;
}

// The smallest legal free block of the request's pool, the lowest address among equals. Every
// block the walk over all blocks would ask `legal` about and could choose is asked, in size
// order: up to the chosen one and its equals (a caller that hears of the blocks `legal` refused
// hears of all that fit no worse); larger ones could not be chosen.
PoolBlock* BlockPool::pick_best_fit(uint64_t size, int stream, Legal legal) {
  const bool from_large = large(size);
  PoolBlock* best = nullptr;
  for (auto it = free_.lower_bound({from_large, size, 0}); it != free_.end(); ++it) {
    PoolBlock& b = *it->second;
    if (b.large != from_large || (best && b.size > best->size)) break;
    if (legal(b, stream) && !best) best = &b;
  }
  return best;
}

void BlockPool::split(PoolBlock& b, uint64_t size) {
  const uint64_t rest_size = b.size - size;
  if (b.large ? rest_size <= kSmallSize : rest_size < kRound) return;
  PoolBlock rest = b;
  rest.addr = b.addr + size;
  rest.size = b.size - size;
  rest.free = true;
  b.size = size;
  index(blocks_.emplace(rest.addr, std::move(rest)).first->second);
}

BlockPool::Allocation BlockPool::allocate(uint64_t bytes, int stream, Legal legal) {
  const uint64_t size = round_up(bytes == 0 ? 1 : bytes, kRound);
  if (PoolBlock* b = pick(size, stream, legal)) {
    unindex(*b);
    split(*b, size);
    b->free = false;
    b->stream = stream;
    return {b->addr, true, std::exchange(b->pending, {}), b->free_op};
  }
  const uint64_t seg = segment_size(size);
  const uint64_t base = new_segment_(seg);
  segment_bytes_ += seg;
  PoolBlock b;
  b.addr = base;
  b.size = seg;
  b.large = large(size);
  b.segment = segments_++;
  b.stream = stream;
  auto [it, ok] = blocks_.emplace(base, std::move(b));
  split(it->second, size);
  return {it->first, false, {}, 0};
}

BlockPool::Allocation BlockPool::allocate_at(uint64_t bytes, int stream, Legal legal, uint64_t prefer) {
  const uint64_t size = round_up(bytes == 0 ? 1 : bytes, kRound);
  auto it = blocks_.upper_bound(prefer);
  if (it != blocks_.begin()) {
    PoolBlock& b = std::prev(it)->second;
    if (b.free && b.addr + b.size >= prefer + size && legal(b, stream)) {
      PoolBlock* use = &b;
      unindex(b);
      if (b.addr < prefer) {  // cut off the part before `prefer`; it stays free
        PoolBlock rest = b;
        rest.addr = prefer;
        rest.size = b.addr + b.size - prefer;
        b.size = prefer - b.addr;
        index(b);
        use = &blocks_.emplace(rest.addr, std::move(rest)).first->second;
      }
      split(*use, size);
      use->free = false;
      use->stream = stream;
      return {use->addr, true, std::exchange(use->pending, {}), use->free_op};
    }
  }
  return allocate(bytes, stream, legal);
}

void BlockPool::release(uint64_t addr, std::vector<uint64_t> pending, uint64_t free_op) {
  PoolBlock& b = blocks_.at(addr);
  b.free = true;
  b.freed_order = ++freed_counter_;
  b.pending = std::move(pending);
  b.free_op = free_op;
  index(b);
  if (b.pending.empty()) merge(addr);
}

void BlockPool::merge(uint64_t addr) {
  if (!merge_) return;
  auto it = blocks_.find(addr);
  auto mergeable = [](const PoolBlock& a, const PoolBlock& b) {
    return a.free && b.free && a.pending.empty() && b.pending.empty() && a.segment == b.segment &&
           a.stream == b.stream && a.addr + a.size == b.addr;
  };
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (mergeable(prev->second, it->second)) {
      unindex(prev->second);
      unindex(it->second);
      prev->second.size += it->second.size;
      prev->second.freed_order = std::max(prev->second.freed_order, it->second.freed_order);
      blocks_.erase(it);
      it = prev;
      index(it->second);
    }
  }
  auto next = std::next(it);
  if (next != blocks_.end() && mergeable(it->second, next->second)) {
    unindex(it->second);
    unindex(next->second);
    it->second.size += next->second.size;
    it->second.freed_order = std::max(it->second.freed_order, next->second.freed_order);
    blocks_.erase(next);
    index(it->second);
  }
}

}  // namespace shardcheck::core
