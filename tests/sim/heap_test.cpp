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
