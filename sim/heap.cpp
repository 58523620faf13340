// Block selection, splitting and merging for both allocator models.
#include "sim/heap.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace shardcheck::sim {

namespace {
uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }
}  // namespace

Block* Heap::pick(uint64_t size, int stream, const Legal& legal) {
  Block* best = nullptr;
  for (auto& [addr, b] : blocks_) {
    if (!b.free || b.size < size) continue;
    if (!legal(b, stream)) continue;
    if (!best) {
      best = &b;
    } else if (reuse_ == Reuse::earliest) {
      if (b.freed_order > best->freed_order) best = &b;
    } else if (b.size < best->size) {
      best = &b;  // ties keep the lower address (map order)
    }
  }
  return best;
}

void Heap::split(Block& b, uint64_t size) {
  if (b.size - size < kRound) return;
  Block rest = b;
  rest.addr = b.addr + size;
  rest.size = b.size - size;
  rest.free = true;
  b.size = size;
  blocks_.emplace(rest.addr, std::move(rest));
}

Heap::Allocation Heap::allocate(uint64_t bytes, int stream, const Legal& legal) {
  const uint64_t size = round_up(bytes == 0 ? 1 : bytes, kRound);
  if (Block* b = pick(size, stream, legal)) {
    split(*b, size);
    b->free = false;
    b->stream = stream;
    return {b->addr, true, std::exchange(b->pending, {}), b->free_op};
  }
  const uint64_t seg = round_up(size, kSegment);
  if (*world_bytes_ + static_cast<int64_t>(seg) > world_limit_) {
    throw ResourceError("simulated device memory exhausted: " + std::to_string(*world_bytes_ + seg) +
                        " bytes would exceed the limit of " + std::to_string(world_limit_));
  }
  *world_bytes_ += static_cast<int64_t>(seg);
  segment_bytes_ += seg;
  Segment s{next_addr_, std::make_unique<std::byte[]>(seg), seg};
  // Never-written device memory reads as NaN in every float dtype.
  std::memset(s.data.get(), 0xff, seg);
  const int id = static_cast<int>(segments_.size());
  segments_.emplace(next_addr_, std::move(s));
  Block b{next_addr_, seg, id, stream, false, 0, {}, 0};
  auto [it, ok] = blocks_.emplace(next_addr_, std::move(b));
  next_addr_ += seg + kRound;  // a guard gap: adjacent segments never look contiguous
  split(it->second, size);
  return {it->first, false, {}, 0};
}

void Heap::release(uint64_t addr, std::vector<uint32_t> pending, uint32_t free_op) {
  Block& b = blocks_.at(addr);
  b.free = true;
  b.freed_order = ++freed_counter_;
  b.pending = std::move(pending);
  b.free_op = free_op;
  if (b.pending.empty()) merge(addr);
}

void Heap::merge(uint64_t addr) {
  if (model_ == AllocatorModel::stream_ordered) return;  // keep free ops attached to blocks
  auto it = blocks_.find(addr);
  auto mergeable = [&](const Block& a, const Block& b) {
    return a.free && b.free && a.pending.empty() && b.pending.empty() && a.segment == b.segment &&
           a.stream == b.stream && a.addr + a.size == b.addr;
  };
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (mergeable(prev->second, it->second)) {
      prev->second.size += it->second.size;
      prev->second.freed_order = std::max(prev->second.freed_order, it->second.freed_order);
      blocks_.erase(it);
      it = prev;
    }
  }
  auto next = std::next(it);
  if (next != blocks_.end() && mergeable(it->second, next->second)) {
    it->second.size += next->second.size;
    it->second.freed_order = std::max(it->second.freed_order, next->second.freed_order);
    blocks_.erase(next);
  }
}

std::byte* Heap::bytes(uint64_t addr) {
  auto it = segments_.upper_bound(addr);
  if (it == segments_.begin()) throw std::logic_error("address outside simulated memory");
  --it;
  if (addr >= it->second.base + it->second.size) throw std::logic_error("address outside simulated memory");
  return it->second.data.get() + (addr - it->second.base);
}

}  // namespace shardcheck::sim
