// Allocator models: per-stream pools, best fit against most-recent reuse, record_stream
// holds, splitting and merging, and the memory limit.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "sim/heap.hpp"

using namespace shardcheck::sim;
namespace core = shardcheck::core;

namespace {
auto same_stream() {
  return [](const Block& b, int s) { return b.stream == s && b.pending.empty(); };
}
}  // namespace

TEST_CASE("caching: a freed block goes back to its stream's pool only", "[sim][heap]") {
  int64_t bytes = 0;
  Heap h(core::Allocator::caching, core::PoolReuse::best_fit, &bytes, int64_t{1} << 30);
  const uint64_t a = h.allocate(4096, 0, same_stream()).addr;
  h.release(a, {}, 0);
  const auto other = h.allocate(4096, 1, same_stream());  // another stream: fresh block
  REQUIRE(other.addr != a);
  REQUIRE_FALSE(other.reused);
  const auto again = h.allocate(4096, 0, same_stream());
  REQUIRE(again.addr == a);
  REQUIRE(again.reused);
}

TEST_CASE("best fit takes the smallest block, earliest the most recently freed", "[sim][heap]") {
  for (core::PoolReuse reuse : {core::PoolReuse::best_fit, core::PoolReuse::earliest}) {
    int64_t bytes = 0;
    Heap h(core::Allocator::caching, reuse, &bytes, int64_t{1} << 30);
    const uint64_t small = h.allocate(1024, 0, same_stream()).addr;
    const uint64_t keep = h.allocate(512, 0, same_stream()).addr;  // separates the two
    const uint64_t big = h.allocate(8192, 0, same_stream()).addr;
    const uint64_t keep2 = h.allocate(512, 0, same_stream()).addr;  // separates big from the tail
    REQUIRE(keep != keep2);
    h.release(small, {}, 0);
    h.release(big, {}, 0);
    const uint64_t got = h.allocate(1024, 0, same_stream()).addr;
    REQUIRE(got == (reuse == core::PoolReuse::best_fit ? small : big));
  }
}

TEST_CASE("a block with pending record_stream uses is not handed out until legal", "[sim][heap]") {
  int64_t bytes = 0;
  Heap h(core::Allocator::caching, core::PoolReuse::best_fit, &bytes, int64_t{1} << 30);
  const uint64_t a = h.allocate(4096, 0, same_stream()).addr;
  h.release(a, {42}, 0);
  bool executed = false;
  auto legal = [&](const Block& b, int s) { return b.stream == s && (b.pending.empty() || executed); };
  REQUIRE(h.allocate(4096, 0, legal).addr != a);
  executed = true;
  const auto r = h.allocate(4096, 0, legal);
  REQUIRE(r.addr == a);
  REQUIRE(r.waited == std::vector<uint64_t>{42});
}

TEST_CASE("blocks split on allocation and merge back when freed", "[sim][heap]") {
  int64_t bytes = 0;
  Heap h(core::Allocator::caching, core::PoolReuse::best_fit, &bytes, int64_t{1} << 30);
  const uint64_t a = h.allocate(1000, 0, same_stream()).addr;  // rounds to 1024, splits a segment
  const uint64_t b = h.allocate(1000, 0, same_stream()).addr;
  REQUIRE(b == a + 1024);
  h.release(a, {}, 0);
  h.release(b, {}, 0);
  // Merged back into one segment-sized block: a large request fits without a new segment.
  const int64_t before = bytes;
  REQUIRE(h.allocate(shardcheck::core::BlockPool::kSegment, 0, same_stream()).addr == a);
  REQUIRE(bytes == before);
}

TEST_CASE("the world memory limit is a clear error", "[sim][heap]") {
  int64_t bytes = 0;
  Heap h(core::Allocator::caching, core::PoolReuse::best_fit, &bytes, 1 << 20);
  REQUIRE_THROWS_AS(h.allocate(2 << 20, 0, same_stream()), ResourceError);
}

// Segment bytes are set as blocks first reach them: every byte of a block handed out reads
// 0xff until written, however the blocks were split, merged and handed out again, and what a
// block's earlier lifetime wrote stays (only never-handed-out bytes are set).
TEST_CASE("every handed-out byte reads 0xff until written, whichever block reaches it first", "[sim][heap]") {
  int64_t bytes = 0;
  Heap h(core::Allocator::caching, core::PoolReuse::best_fit, &bytes, int64_t{1} << 30);
  auto all_ff = [&](uint64_t addr, uint64_t n) {
    const std::byte* p = h.bytes(addr);
    for (uint64_t i = 0; i < n; ++i) {
      if (p[i] != std::byte{0xff}) return false;
    }
    return true;
  };
  const uint64_t a = h.allocate(1024, 0, same_stream()).addr;
  REQUIRE(all_ff(a, 1024));
  std::memset(h.bytes(a), 0, 1024);
  const uint64_t b = h.allocate(4096, 0, same_stream()).addr;  // past a: not set until now
  REQUIRE(all_ff(b, 4096));
  h.release(a, {}, 0);
  h.release(b, {}, 0);
  // Merged back: a block over both keeps a's written zeros and reads 0xff past them.
  const uint64_t c = h.allocate(8192, 0, same_stream()).addr;
  REQUIRE(c == a);
  REQUIRE(h.bytes(c)[0] == std::byte{0});
  REQUIRE(h.bytes(c)[1023] == std::byte{0});
  REQUIRE(all_ff(c + 1024, 8192 - 1024));
  // A block of a whole new segment, the last byte included.
  const uint64_t big = h.allocate(shardcheck::core::BlockPool::kSegment, 0, same_stream()).addr;
  REQUIRE(all_ff(big, shardcheck::core::BlockPool::kSegment));
}

// Ranks' heaps (their colors) start their first segments in 64 different cache lines of a
// 4 KiB page, so the same simulated offset falls in different first-level cache sets, and a staggered segment
// still holds all of its bytes: the last one is 0xff and writable, and a segment-sized block reads 0xff from
// its first byte to its last.
TEST_CASE("heaps of different ranks stagger their host bytes across cache sets", "[sim][heap]") {
  int64_t bytes = 0;
  std::vector<uint64_t> offsets;
  for (int color = 0; color < 64; ++color) {
    Heap h(core::Allocator::caching, core::PoolReuse::best_fit, &bytes, int64_t{1} << 30, true, color);
    const uint64_t seg = shardcheck::core::BlockPool::kSegment;
    const uint64_t a = h.allocate(seg, 0, same_stream()).addr;
    std::byte* p = h.bytes(a);
    REQUIRE(p[0] == std::byte{0xff});
    REQUIRE(p[seg - 1] == std::byte{0xff});
    p[seg - 1] = std::byte{1};
    REQUIRE(h.bytes(a + seg - 1)[0] == std::byte{1});
    offsets.push_back(Heap::stagger_bytes(static_cast<uint64_t>(color), 0) / 64);
  }
  std::sort(offsets.begin(), offsets.end());
  REQUIRE(std::unique(offsets.begin(), offsets.end()) == offsets.end());  // 64 ranks, 64 sets
}

TEST_CASE("placed blocks: a recorded address reuses every freed block it overlaps", "[sim][heap]") {
  int64_t bytes = 0;
  Heap h(core::Allocator::caching, core::PoolReuse::best_fit, &bytes, int64_t{1} << 30, /*values*/ false);
  std::vector<const Block*> held;
  auto legal = [&](const Block& b, int) {
    if (!b.pending.empty()) held.push_back(&b);
    return b.pending.empty();
  };
  const uint64_t seg = 0x7f3a40000000ULL, mib = 1 << 20;
  const auto first = h.place(seg, 4 * mib, 0, legal);
  const auto second = h.place(seg + 4 * mib, 4 * mib, 0, legal);
  REQUIRE(first);
  REQUIRE(second);
  REQUIRE(first->addr == Heap::kPlaced + seg);
  REQUIRE_FALSE(first->reused);
  // A live block is never overlapped: the caller falls back to the model.
  REQUIRE_FALSE(h.place(seg + mib, 2 * mib, 0, legal));
  h.release(first->addr, {}, /*free_op*/ 7);
  h.release(second->addr, {}, /*free_op*/ 9);
  // Another stream's pool never takes them (a caching allocator's block stays with its stream).
  REQUIRE_FALSE(h.place(seg, 8 * mib, 1, legal));
  // The coalesced block: one allocation over both, handed over by the later free.
  const auto both = h.place(seg, 8 * mib, 0, legal);
  REQUIRE(both);
  REQUIRE(both->reused);
  REQUIRE(both->free_op == 9);
  REQUIRE(h.block(both->addr).size == 8 * mib);
  // A held block (record_stream uses pending) of the stream is offered to `legal`, not taken.
  h.release(both->addr, {42}, 11);
  const auto elsewhere = h.place(seg + 16 * mib, 2 * mib, 0, legal);
  REQUIRE(elsewhere);
  REQUIRE_FALSE(elsewhere->reused);
  REQUIRE(held.size() == 1);
  REQUIRE(held[0]->free_op == 11);
  // Taking part of it waits for those uses; the rest stays free, and held.
  const auto part = h.place(seg + mib, mib, 0, legal);
  REQUIRE(part);
  REQUIRE(part->waited == std::vector<uint64_t>{42});
  REQUIRE(h.block(Heap::kPlaced + seg).free);
  REQUIRE(h.block(Heap::kPlaced + seg + 2 * mib).size == 6 * mib);
  // With values there are host bytes behind every block: no placing.
  Heap v(core::Allocator::caching, core::PoolReuse::best_fit, &bytes, int64_t{1} << 30);
  REQUIRE_FALSE(v.place(seg, 4096, 0, legal));
}

TEST_CASE("torch geometry: small and large pools, PyTorch's segment sizes and split rule", "[sim][heap]") {
  int64_t bytes = 0;
  Heap h(core::Allocator::caching, core::PoolReuse::best_fit, &bytes, int64_t{1} << 34, false, 0,
         core::PoolGeometry::torch);
  const uint64_t mib = 1 << 20;
  const auto small = h.allocate(1000, 0, same_stream());
  REQUIRE(h.block(small.addr).size == 1024);  // rounded to 512
  REQUIRE(h.segment_bytes() == 2 * mib);      // a 2 MiB small segment
  const auto a = h.allocate(4 * mib, 0, same_stream());
  REQUIRE(h.segment_bytes() == 22 * mib);  // a 20 MiB large segment
  const auto b = h.allocate(4 * mib, 0, same_stream());
  REQUIRE(b.addr == a.addr + 4 * mib);  // the same segment
  // A small request never takes a large block, however free.
  h.release(a.addr, {}, 1);
  const auto small2 = h.allocate(4096, 0, same_stream());
  REQUIRE(small2.addr == small.addr + 1024);
  // Freed neighbours coalesce with the segment's free tail; the next 8 MiB takes the first.
  h.release(b.addr, {}, 2);
  const auto both = h.allocate(8 * mib, 0, same_stream());
  REQUIRE(both.addr == a.addr);
  REQUIRE(both.reused);
  // A large block splits only when more than 1 MiB would remain.
  h.release(both.addr, {}, 3);
  const auto whole = h.allocate(20 * mib - 1000 * 1024, 0, same_stream());
  REQUIRE(whole.addr == a.addr);
  REQUIRE(h.block(whole.addr).size == 20 * mib);
  // 10 MiB and more: a segment of its own, in 2 MiB steps.
  const uint64_t before = h.segment_bytes();
  h.allocate(11 * mib, 0, same_stream());
  REQUIRE(h.segment_bytes() - before == 12 * mib);
}
