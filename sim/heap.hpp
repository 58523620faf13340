// One rank's simulated device memory: segments of real host bytes behind simulated device
// addresses, carved into blocks by core::BlockPool under an allocator model. `caching`
// follows PyTorch's CUDACachingAllocator: blocks belong to the stream current at allocation,
// a free returns the block to that stream's pool at host time, and a block with
// record_stream uses is held back until those uses are done. With `stream_ordered`
// (cudaMallocAsync) a freed block is reusable at once in its own stream's order, and by
// other streams once the free is ordered before them (no merging, so frees stay attached).
//   auto a = heap.allocate(4096, stream, [&](const core::PoolBlock& b, int s) { return ready(b); });
//   heap.release(a.addr, pending_records, free_op);
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include "core/runtime/block_pool.hpp"
#include "sim/options.hpp"

namespace shardcheck::sim {

using Block = core::PoolBlock;

class ResourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Heap {
 public:
  static constexpr uint64_t kBase = 0x7f0000000000ULL;  // first simulated device address
  static constexpr uint64_t kPlaced = 1ULL << 60;       // where recorded addresses start
  static constexpr uint64_t kMaxPlaced = 1ULL << 56;    // recorded addresses stay below this
  using Legal = core::BlockPool::Legal;
  using Allocation = core::BlockPool::Allocation;

  // values = false: segments are address ranges only, with no host bytes behind them.
  // `color` (a rank's index) staggers where the host bytes of its segments start (below).
  Heap(core::Allocator model, core::PoolReuse reuse, int64_t* world_bytes, int64_t world_limit,
       bool values = true, int color = 0, core::PoolGeometry geometry = core::PoolGeometry::simple);

  // A block of at least `bytes` for `stream`. Throws ResourceError past the memory limit.
  Allocation allocate(uint64_t bytes, int stream, Legal legal) {
    Allocation a = pool_.allocate(bytes, stream, legal);
    if (values_) initialize(a.addr, pool_.block(a.addr).size);
    return a;
  }
  // A block at the device address `at` a capture recorded, of `bytes`, for `stream`: placed
  // at kPlaced + at, beside the model's blocks, so the lifetimes a real allocator gave shared
  // bytes share them here, whatever it split or coalesced. It reuses every freed placed block
  // it overlaps (the most recent free names the hand-over; their record_stream uses must have
  // completed, as the allocator saw). Nothing when it cannot be exact: a run with values, an
  // overlap with a live block (a storage that grew in place) or, under the caching
  // allocator, with a block of another stream's pool (the memory went back to the driver).
  // `legal` is asked of every other freed placed block of `stream` as large, that record_stream
  // uses hold back: the allocation could have taken it had those streams run ahead.
  std::optional<Allocation> place(uint64_t at, uint64_t bytes, int stream, Legal legal);
  void release(uint64_t addr, std::vector<uint64_t> pending, uint64_t free_op);
  const Block& block(uint64_t addr) const { return addr >= kPlaced ? placed_.at(addr) : pool_.block(addr); }
  // How far into its host allocation segment `ordinal` of heap `color` starts (see Segment).
  static uint64_t stagger_bytes(uint64_t color, uint64_t ordinal) {
    // An odd multiplier walks every color; the segment's ordinal moves a rank's later ones.
    return (color * 37 + ordinal * 11) % kColors * kCacheLine;
  }
  std::byte* bytes(uint64_t addr);  // host pointer for a device address inside a segment
  uint64_t segment_bytes() const { return pool_.segment_bytes(); }

 private:
  uint64_t new_segment(uint64_t size);
  // Sets the never-handed-out bytes of [addr, addr + size) to 0xff (NaN in every float
  // dtype): a segment's bytes are set as blocks first reach them, not when it is made, so a
  // run touches the memory its blocks use, not every segment's 256 KiB.
  void initialize(uint64_t addr, uint64_t size);

  int64_t* world_bytes_;
  int64_t world_limit_;
  bool values_;
  uint64_t color_;
  uint64_t next_addr_ = kBase;
  // Host bytes start a colored number of cache lines into their allocation. A segment's
  // allocation is page aligned, so without it the same tensor of every rank would sit at the
  // same offset in its page, in the same first-level cache set: a collective's 64 inputs
  // would compete for 12 ways. Only host addresses move; simulated addresses do not.
  static constexpr uint64_t kCacheLine = 64;
  static constexpr uint64_t kColors = 64;  // 4 KiB, a first-level cache way, of staggers
  struct Segment {
    std::unique_ptr<std::byte[]> storage;
    std::byte* data = nullptr;  // storage + the segment's stagger
    uint64_t size = 0;
    uint64_t initialized = 0;  // bytes [0, initialized) hold 0xff or what was written since
  };
  std::map<uint64_t, Segment> segments_;  // by base address
  core::BlockPool pool_;
  core::Allocator model_;
  uint64_t placed_frees_ = 0;
  std::map<uint64_t, Block> placed_;  // placed blocks, live and freed, by address
  std::set<uint64_t> placed_held_;    // freed placed blocks with record_stream uses pending
};

}  // namespace shardcheck::sim
