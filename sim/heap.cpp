// Simulated segments: host memory behind simulated device addresses.
#include "sim/heap.hpp"

#include <cstring>
#include <string>

namespace shardcheck::sim {

Heap::Heap(core::Allocator model, core::PoolReuse reuse, int64_t* world_bytes, int64_t world_limit,
           bool values, int color)
    : world_bytes_(world_bytes),
      world_limit_(world_limit),
      values_(values),
      color_(static_cast<uint64_t>(color)),
      pool_(model == core::Allocator::caching, reuse, [this](uint64_t size) { return new_segment(size); }) {}

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
