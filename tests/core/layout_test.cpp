// GlobalLayout: the DESIGN conformance examples, the remainder-closing rule, local ranges
// over multi-axis placements, row ownership, and invariants over many random shape lists.
#include <catch2/catch.hpp>
#include <numeric>

#include "core/layout/layout.hpp"
#include "core/base/rng.hpp"

using namespace shardcheck::core;

namespace {
std::vector<int64_t> offsets(const GlobalLayout& l) {
  std::vector<int64_t> o;
  for (const auto& t : l.tensors()) o.push_back(t.offset);
  return o;
}
LocalRange flat_range(const GlobalLayout& l, int rank) {
  const Placement p[] = {Placement::flat()};
  const int sizes[] = {l.ranks()}, coords[] = {rank};
  return local_range(l, p, sizes, coords);
}
}  // namespace

TEST_CASE("DESIGN conformance: (5,4),(2,6),(3,) over 2 ranks", "[core][layout]") {
  auto l = GlobalLayout::create({{5, 4}, {2, 6}, {3}}, 2).value();
  REQUIRE(l.chunk() == 12);
  REQUIRE(offsets(l) == std::vector<int64_t>{0, 24, 20});
  REQUIRE(l.size() == 48);
  REQUIRE(l.tensor(2).fragment);
  REQUIRE(l.unused() == std::vector<ElementRange>{{23, 24}, {36, 48}});
  REQUIRE(l.gap_elements() == 1);
  REQUIRE(l.padding_elements() == 12);
}

TEST_CASE("DESIGN conformance: (4,4),(1,6) over 2 ranks", "[core][layout]") {
  auto l = GlobalLayout::create({{4, 4}, {1, 6}}, 2).value();
  REQUIRE(offsets(l) == std::vector<int64_t>{0, 18});
  REQUIRE(l.size() == 24);
}

TEST_CASE("a later regular tensor's remainder closes an open chunk", "[core][layout]") {
  // (5,4) leaves 8 of a 12-chunk; (2,6) has no remainder; (7,4) has remainder 4 and closes it.
  auto l = GlobalLayout::create({{5, 4}, {2, 6}, {7, 4}}, 2).value();
  REQUIRE(l.chunk() == 12);
  REQUIRE(offsets(l) == std::vector<int64_t>{0, 48, 20});
  REQUIRE(l.size() == 72);
  REQUIRE(l.gap_elements() == 0);
}

TEST_CASE("fragments sort by size and go to the tail when no gap fits", "[core][layout]") {
  auto l = GlobalLayout::create({{3, 4}, {1, 6}, {5, 4}, {2}, {1, 3}}, 1).value();
  // chunk 12: fragments (1,6)=6, (1,3)=3, (2)=2 sorted 6,3,2. (3,4) fills [0,12); (5,4)
  // leaves the gap [32,36): (1,6) does not fit, (1,3) fits at 33 (aligned to its row of 3),
  // and (2) no longer fits, so (1,6) and (2) go to the tail at 36 and 42.
  REQUIRE(offsets(l) == std::vector<int64_t>{0, 36, 12, 42, 33});
  REQUIRE(l.size() == 48);
}

TEST_CASE("0-D tensors, bad rank counts and empty lists are rejected", "[core][layout]") {
  REQUIRE_THAT(GlobalLayout::create({{}}, 2).error().message(), Catch::Contains("0-D"));
  REQUIRE_THAT(GlobalLayout::create({{3}}, 0).error().message(), Catch::Contains("ranks must be"));
  REQUIRE_FALSE(GlobalLayout::create({}, 2).ok());
  REQUIRE_THAT(parse_shape("5x0").error().message(), Catch::Contains("at least 1"));
  REQUIRE_THAT(parse_shape("5xa").error().message(), Catch::Contains("not a positive integer"));
  REQUIRE_THAT(parse_shape("").error().message(), Catch::Contains("0-D"));
  REQUIRE_THAT(parse_shapes("3,,4").error().message(), Catch::Contains("tensor 1"));
  REQUIRE(parse_shapes("5x4, 2x6 ,3").value() == std::vector<Shape>{{5, 4}, {2, 6}, {3}});
}

TEST_CASE("row ownership per rank, including ranks that hold none", "[core][layout]") {
  auto l = GlobalLayout::create({{5, 4}, {2, 6}, {3}}, 2).value();
  REQUIRE(owned_rows(l, flat_range(l, 0)) ==
          std::vector<OwnedRows>{{0, 0, 5, 0}, {2, 0, 3, 20}});
  REQUIRE(owned_rows(l, flat_range(l, 1)) == std::vector<OwnedRows>{{1, 0, 2, 0}});
  auto small = GlobalLayout::create({{2, 6}}, 4).value();
  REQUIRE(small.size() == 24);
  REQUIRE(owned_rows(small, flat_range(small, 1)) == std::vector<OwnedRows>{{0, 1, 1, 0}});
  REQUIRE(owned_rows(small, flat_range(small, 2)).empty());
  REQUIRE(owned_rows(small, flat_range(small, 3)).empty());
}

TEST_CASE("local range walks axes from last to first", "[core][layout]") {
  auto l = GlobalLayout::create({{8, 3}}, 6).value();  // D = 2 x 3
  REQUIRE(l.size() == 36);
  const int sizes[] = {2, 3};
  const Placement ff[] = {Placement::flat(), Placement::flat()};
  const Placement rf[] = {Placement::replicate(), Placement::flat()};
  const Placement rr[] = {Placement::replicate(), Placement::replicate()};
  const int c[] = {1, 2};  // dp_outer 1, dp_inner 2
  // Inner axis first: piece 2 of 3 (offset 24, 12 elements), then outer: half 1 of that.
  REQUIRE(local_range(l, rf, sizes, c) == LocalRange{24, 12});
  REQUIRE(local_range(l, ff, sizes, c) == LocalRange{30, 6});
  REQUIRE(local_range(l, rr, sizes, c) == LocalRange{0, 36});
}

TEST_CASE("layout invariants hold over random shape lists", "[core][layout]") {
  // Tensors never overlap, start row-aligned, lie inside the buffer; the size is a multiple
  // of chunk * D; every rank boundary falls on a row boundary; ownership partitions elements.
  Rng rng(2024);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng.uniform(6));
    const int ranks = 1 + static_cast<int>(rng.uniform(8));
    std::vector<Shape> shapes;
    for (int i = 0; i < n; ++i) {
      if (rng.bernoulli(0.4)) {
        shapes.push_back({1 + rng.uniform_int(0, 30)});
      } else {
        shapes.push_back({1 + rng.uniform_int(0, 9), 1 + rng.uniform_int(0, 7)});
      }
    }
    auto l = GlobalLayout::create(shapes, ranks).value();
    REQUIRE(l.size() % (l.chunk() * ranks) == 0);
    std::vector<int> owner(l.size(), -1);
    for (int t = 0; t < l.num_tensors(); ++t) {
      const auto& s = l.tensor(t);
      REQUIRE(s.offset % s.row == 0);
      REQUIRE(s.offset + s.numel <= l.size());
      for (int64_t e = s.offset; e < s.offset + s.numel; ++e) {
        REQUIRE(owner[e] == -1);
        owner[e] = t;
      }
    }
    int64_t owned = 0;
    for (int r = 0; r < ranks; ++r) {
      for (const auto& o : owned_rows(l, flat_range(l, r))) owned += o.rows * l.tensor(o.tensor).row;
    }
    int64_t total = 0;
    for (const auto& t : l.tensors()) total += t.numel;
    REQUIRE(owned == total);
  }
}
