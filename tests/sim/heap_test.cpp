// Allocator models: per-stream pools, best fit against most-recent reuse, record_stream
// holds, splitting and merging, and the memory limit.
#include <catch2/catch.hpp>

#include "sim/heap.hpp"

using namespace shardcheck::sim;

namespace {
Heap::Legal same_stream() {
  return [](const Block& b, int s) { return b.stream == s && b.pending.empty(); };
}
}  // namespace

TEST_CASE("caching: a freed block goes back to its stream's pool only", "[sim][heap]") {
  int64_t bytes = 0;
  Heap h(AllocatorModel::caching, Reuse::best_fit, &bytes, int64_t{1} << 30);
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
  for (Reuse reuse : {Reuse::best_fit, Reuse::earliest}) {
    int64_t bytes = 0;
    Heap h(AllocatorModel::caching, reuse, &bytes, int64_t{1} << 30);
    const uint64_t small = h.allocate(1024, 0, same_stream()).addr;
    const uint64_t keep = h.allocate(512, 0, same_stream()).addr;  // separates the two
    const uint64_t big = h.allocate(8192, 0, same_stream()).addr;
    const uint64_t keep2 = h.allocate(512, 0, same_stream()).addr;  // separates big from the tail
    REQUIRE(keep != keep2);
    h.release(small, {}, 0);
    h.release(big, {}, 0);
    const uint64_t got = h.allocate(1024, 0, same_stream()).addr;
    REQUIRE(got == (reuse == Reuse::best_fit ? small : big));
  }
}

TEST_CASE("a block with pending record_stream uses is not handed out until legal", "[sim][heap]") {
  int64_t bytes = 0;
  Heap h(AllocatorModel::caching, Reuse::best_fit, &bytes, int64_t{1} << 30);
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
  Heap h(AllocatorModel::caching, Reuse::best_fit, &bytes, int64_t{1} << 30);
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
  Heap h(AllocatorModel::caching, Reuse::best_fit, &bytes, 1 << 20);
  REQUIRE_THROWS_AS(h.allocate(2 << 20, 0, same_stream()), ResourceError);
}
