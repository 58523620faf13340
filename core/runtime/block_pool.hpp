// The block model of a caching allocator, shared by the simulator and the GPU backend:
// segments carved into blocks that belong to the stream current at allocation; a free block
// goes back to its stream's pool, held back while `pending` uses (record_stream) remain; best
// fit (PyTorch's choice) or the most recently freed block; splitting and merging. Where the
// memory comes from is the backend's: simulated bytes, or cudaMalloc.
//   BlockPool pool(/*merge*/ true, PoolReuse::best_fit, [&](uint64_t n) { return my_malloc(n); });
//   auto a = pool.allocate(4096, stream, legal);     // a.addr, a.reused, a.waited
//   pool.release(a.addr, pending_events, free_op);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "core/base/function_ref.hpp"
#include "core/runtime/allocator.hpp"

namespace shardcheck::core {

struct PoolBlock {
  uint64_t addr = 0;
  uint64_t size = 0;
  int segment = 0;
  int stream = 0;
  bool free = false;
  bool large = false;             // PoolGeometry::torch: from the large pool
  uint64_t freed_order = 0;       // larger = freed more recently
  std::vector<uint64_t> pending;  // backend handles (records, events) that must complete first
  uint64_t free_op = 0;           // backend's id of the free that released it
};

class BlockPool {
 public:
  static constexpr uint64_t kRound = 512;           // block sizes are multiples of this
  static constexpr uint64_t kSegment = 256 * 1024;  // segments grow in these steps

  // May free block `b` be handed to `stream` now? The backend decides (pending uses done;
  // stream-ordered rules). Called only during allocate, so a reference, not a copy.
  using Legal = FunctionRef<bool(const PoolBlock& b, int stream)>;
  // Provides a new segment of `size` bytes and returns its base address; throws when the
  // backend is out of memory.
  using NewSegment = std::function<uint64_t(uint64_t size)>;

  BlockPool(bool merge, PoolReuse reuse, NewSegment new_segment, PoolGeometry geometry = PoolGeometry::simple)
      : merge_(merge), reuse_(reuse), geometry_(geometry), new_segment_(std::move(new_segment)) {}

  struct Allocation {
    uint64_t addr = 0;
    bool reused = false;
    std::vector<uint64_t> waited;  // pending uses the reuse had to wait for
    uint64_t free_op = 0;          // the free that released the reused block
  };
  Allocation allocate(uint64_t bytes, int stream, Legal legal);
  // The same, taking the free block that holds address `prefer` (cut to start there) when it
  // is legal and large enough, whatever the rule would pick: the GPU backend's forced replay
  // hands a freed block to the allocation the simulator saw receive it.
  Allocation allocate_at(uint64_t bytes, int stream, Legal legal, uint64_t prefer);
  // Frees the block at `addr`; it may not be reused before `pending` complete.
  void release(uint64_t addr, std::vector<uint64_t> pending, uint64_t free_op);

  const PoolBlock& block(uint64_t addr) const { return blocks_.at(addr); }
  uint64_t segment_bytes() const { return segment_bytes_; }

 private:
  PoolBlock* pick(uint64_t size, int stream, Legal legal);
  void split(PoolBlock& b, uint64_t size);
  bool large(uint64_t size) const;             // a request of the large pool
  uint64_t segment_size(uint64_t size) const;  // the segment a request that fits no block gets
  void merge(uint64_t addr);
  // The free blocks, by pool (large or not), size and address: best fit is the first legal one
  // from the request's size up, ties in address order, as a walk over every block finds it.
  using FreeKey = std::tuple<bool, uint64_t, uint64_t>;
  void index(PoolBlock& b) { free_.emplace(FreeKey{b.large, b.size, b.addr}, &b); }
  void unindex(const PoolBlock& b) { free_.erase(FreeKey{b.large, b.size, b.addr}); }
  PoolBlock* pick_best_fit(uint64_t size, int stream, Legal legal);

  bool merge_;
  PoolReuse reuse_;
  PoolGeometry geometry_;
  NewSegment new_segment_;
  uint64_t freed_counter_ = 0;
  uint64_t segment_bytes_ = 0;
  int segments_ = 0;
  std::map<uint64_t, PoolBlock> blocks_;  // by address
  std::map<FreeKey, PoolBlock*> free_;    // the free blocks of blocks_ (index, unindex)
};

}  // namespace shardcheck::core
