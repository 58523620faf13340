// One rank's simulated device memory: segments of real bytes, carved into blocks by an
// allocator model. `caching` follows PyTorch's CUDACachingAllocator: blocks belong to the
// stream current at allocation, a free returns the block to that stream's pool at host time,
// and a block with record_stream uses is held back until those uses are done. With
// `stream_ordered` (cudaMallocAsync) a freed block is reusable at once in its own stream's
// order, and by other streams once the free is ordered before them.
//   uint64_t a = heap.allocate(4096, stream, [&](const Block& b) { return ready(b); });
//   heap.release(a, pending_records);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "sim/options.hpp"

namespace shardcheck::sim {

struct Block {
  uint64_t addr = 0;
  uint64_t size = 0;
  int segment = 0;
  int stream = 0;
  bool free = false;
  uint64_t freed_order = 0;           // larger = freed more recently
  std::vector<uint32_t> pending;      // records that must execute before reuse (caching)
  uint32_t free_op = 0;               // stream_ordered: the free operation's id
};

class Heap {
 public:
  static constexpr uint64_t kRound = 512;               // block sizes are multiples of this
  static constexpr uint64_t kSegment = 256 * 1024;      // segments grow in these steps
  static constexpr uint64_t kBase = 0x7f0000000000ULL;  // first simulated device address

  Heap(AllocatorModel model, Reuse reuse, int64_t* world_bytes, int64_t world_limit)
      : model_(model), reuse_(reuse), world_bytes_(world_bytes), world_limit_(world_limit) {}

  // May the free block `b` be handed to `stream`? Decided by the world (record_stream uses
  // done; for stream_ordered, the free ordered before the stream).
  using Legal = std::function<bool(const Block& b, int stream)>;

  struct Allocation {
    uint64_t addr = 0;
    bool reused = false;
    std::vector<uint32_t> waited;  // record_stream records the reuse had to wait for
    uint32_t free_op = 0;          // the free that released the reused block
  };
  // A block of at least `bytes` for `stream`. Throws ResourceError past the memory limit.
  Allocation allocate(uint64_t bytes, int stream, const Legal& legal);
  // Frees the block at `addr`; it may not be reused before `pending` records execute.
  void release(uint64_t addr, std::vector<uint32_t> pending, uint32_t free_op);

  const Block& block(uint64_t addr) const { return blocks_.at(addr); }
  std::byte* bytes(uint64_t addr);  // host pointer for a device address inside a segment
  uint64_t segment_bytes() const { return segment_bytes_; }

 private:
  Block* pick(uint64_t size, int stream, const Legal& legal);
  void split(Block& b, uint64_t size);
  void merge(uint64_t addr);

  AllocatorModel model_;
  Reuse reuse_;
  int64_t* world_bytes_;
  int64_t world_limit_;
  uint64_t next_addr_ = kBase;
  uint64_t freed_counter_ = 0;
  uint64_t segment_bytes_ = 0;
  std::map<uint64_t, Block> blocks_;  // by address
  struct Segment {
    uint64_t base;
    std::unique_ptr<std::byte[]> data;
    uint64_t size;
  };
  std::map<uint64_t, Segment> segments_;  // by base address
};

class ResourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace shardcheck::sim
