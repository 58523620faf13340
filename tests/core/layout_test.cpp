// GlobalLayout: the semantics.md conformance examples, the remainder-closing rule (hand-derived
// examples), local ranges over multi-axis placements, row ownership, invariants over many
// random shape lists, and agreement with an independent implementation of docs/semantics.md §2.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>

#include "core/base/rng.hpp"
#include "core/layout/layout.hpp"

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

// ---------------------------------------------------------------------------------------
// An independent reading of docs/semantics.md §2's global layout, written from the text of steps
// 1-5 (not from core/layout/layout.cpp), for the property below. Where the text leaves a choice,
// the reading is spelled out: "fill the gap greedily" walks the fragments once in their
// sorted order with a cursor that only moves forward; each one that fits at the cursor,
// rounded up to its row, is placed there.
namespace {
namespace spec {

struct Layout {
  std::vector<int64_t> offsets;  // per tensor, in the input order
  int64_t size = 0;
  int closers = 0;        // regular tensors placed by the remainder-closing rule
  int gap_fragments = 0;  // fragments placed inside a gap rather than at the tail
};

int64_t up(int64_t x, int64_t m) { return x % m == 0 ? x : x + (m - x % m); }

Layout layout(const std::vector<Shape>& shapes, int ranks) {
  const int n = static_cast<int>(shapes.size());
  // Step 1: rows and the chunk.
  std::vector<int64_t> row(n, 1), count(n);
  int64_t chunk = 1;
  for (int i = 0; i < n; ++i) {
    for (size_t d = 1; d < shapes[i].size(); ++d) row[i] *= shapes[i][d];
    count[i] = shapes[i][0] * row[i];
    chunk = std::lcm(chunk, row[i]);
  }
  // Step 2: fragments by numel descending, ties in input order; regular tensors in order.
  std::vector<int> regular, fragments;
  for (int i = 0; i < n; ++i) (count[i] < chunk ? fragments : regular).push_back(i);
  std::sort(fragments.begin(), fragments.end(),
            [&](int a, int b) { return count[a] != count[b] ? count[a] > count[b] : a < b; });
  Layout out;
  out.offsets.assign(n, -1);
  // Step 3: regular tensors still waiting are kept in a list; a closer leaves it early.
  std::vector<int> waiting = regular;
  int64_t next = 0;
  while (!waiting.empty()) {
    const int t = waiting.front();
    waiting.erase(waiting.begin());
    out.offsets[t] = next;
    const int64_t rem = count[t] % chunk;
    if (rem == 0) {
      next += count[t];
      continue;
    }
    const int64_t gap_begin = next + count[t];
    next = next + count[t] - rem + chunk;  // round_up(numel, chunk) past the tensor's start
    int64_t gap_end = next;
    for (auto it = waiting.begin(); it != waiting.end(); ++it) {
      const int64_t crem = count[*it] % chunk;
      if (crem == 0 || rem + crem > chunk) continue;
      out.offsets[*it] = next - crem;
      gap_end = next - crem;
      next += count[*it] - crem;  // its whole chunks
      ++out.closers;
      waiting.erase(it);
      break;
    }
    int64_t cursor = gap_begin;
    for (int f : fragments) {
      if (out.offsets[f] >= 0) continue;
      const int64_t at = up(cursor, row[f]);
      if (at + count[f] <= gap_end) {
        out.offsets[f] = at;
        cursor = at + count[f];
        ++out.gap_fragments;
      }
    }
  }
  // Step 4: the tail.
  for (int f : fragments) {
    if (out.offsets[f] >= 0) continue;
    out.offsets[f] = up(next, row[f]);
    next = out.offsets[f] + count[f];
  }
  // Step 5.
  out.size = up(next, chunk * ranks);
  return out;
}

}  // namespace spec
}  // namespace

TEST_CASE("semantics.md conformance: (5,4),(2,6),(3,) over 2 ranks", "[core][layout]") {
  auto l = GlobalLayout::create({{5, 4}, {2, 6}, {3}}, 2).value();
  REQUIRE(l.chunk() == 12);
  REQUIRE(offsets(l) == std::vector<int64_t>{0, 24, 20});
  REQUIRE(l.size() == 48);
  REQUIRE(l.tensor(2).fragment);
  REQUIRE(l.unused() == std::vector<ElementRange>{{23, 24}, {36, 48}});
  REQUIRE(l.gap_elements() == 1);
  REQUIRE(l.padding_elements() == 12);
}

TEST_CASE("semantics.md conformance: (4,4),(1,6) over 2 ranks", "[core][layout]") {
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

// Each example below is worked by hand from docs/semantics.md §2 step 3; the comment carries the
// arithmetic. They fail if the closer search takes anything but the first later regular
// tensor whose remainder fits, places it anywhere but `next - crem`, or advances `next` by
// anything but its whole chunks.
TEST_CASE("remainder closing takes the first later tensor that fits, not the best fit", "[core][layout]") {
  // rows 4, 3, 3, 4 -> chunk 12; numel 20, 21, 15, 16: all regular.
  // (5,4) at 0: rem 8, gap from 20, next = round_up(20, 12) = 24.
  //   (7,3): crem 21 % 12 = 9, 8 + 9 = 17 > 12, skipped.
  //   (5,3): crem 3, 8 + 3 = 11 <= 12: the first fit, at 24 - 3 = 21; next += 15 - 3 -> 36.
  //   (4,4) would fit exactly (8 + 4 = 12) but comes later.
  // (7,3) at 36: rem 9, next = 36 + 24 = 60; (4,4): 9 + 4 = 13 > 12, no closer.
  // (4,4) at 60: rem 4, next = 84. D = 1: size = round_up(84, 12) = 84.
  auto l = GlobalLayout::create({{5, 4}, {7, 3}, {5, 3}, {4, 4}}, 1).value();
  REQUIRE(l.chunk() == 12);
  REQUIRE(offsets(l) == std::vector<int64_t>{0, 36, 21, 60});
  REQUIRE(l.size() == 84);
  REQUIRE(l.unused() == std::vector<ElementRange>{{20, 21}, {57, 60}, {76, 84}});
}

TEST_CASE("a closer that leaves part of the gap open lets a fragment fill it", "[core][layout]") {
  // rows 4, 3, 1 -> chunk 12; (1,) has numel 1 < 12: a fragment.
  // (5,4) at 0: rem 8, gap from 20, next 24. (5,3): crem 15 % 12 = 3, 8 + 3 = 11 <= 12,
  // at 24 - 3 = 21 (a multiple of its row 3); the gap is [20, 21); next += 12 -> 36.
  // The fragment (1,) fits at 20. D = 2: size = round_up(36, 12 * 2) = 48.
  auto l = GlobalLayout::create({{5, 4}, {5, 3}, {1}}, 2).value();
  REQUIRE(offsets(l) == std::vector<int64_t>{0, 21, 20});
  REQUIRE(l.size() == 48);
  REQUIRE(l.gap_elements() == 0);
  // The rank boundary at 24 cuts (5,3) after its first row (21 + 3): whole rows each side.
  REQUIRE(owned_rows(l, flat_range(l, 1)) == std::vector<OwnedRows>{{1, 1, 4, 0}});
}

TEST_CASE("a tensor passed over as a closer opens its own gap, which a later one closes", "[core][layout]") {
  // rows 4, 6, 2 -> chunk 12; numel 20, 18, 18.
  // (5,4) at 0: rem 8, next 24. (3,6): crem 6, 8 + 6 = 14 > 12; (9,2): crem 6, 14 > 12.
  //   No closer: [20, 24) stays a gap.
  // (3,6) at 24: rem 6, gap from 42, next = 24 + 24 = 48. (9,2): 6 + 6 = 12 <= 12, at
  //   48 - 6 = 42 (even, its row is 2); the gap is empty; next += 18 - 6 -> 60.
  // D = 2: size = round_up(60, 24) = 72; D = 3: round_up(60, 36) = 72; D = 4: 96.
  for (auto [ranks, size] : {std::pair{1, 60}, {2, 72}, {3, 72}, {4, 96}}) {
    auto l = GlobalLayout::create({{5, 4}, {3, 6}, {9, 2}}, ranks).value();
    REQUIRE(offsets(l) == std::vector<int64_t>{0, 24, 42});
    REQUIRE(l.size() == size);
    REQUIRE(l.gap_elements() == 4);
  }
}

TEST_CASE("a fragment never closes a chunk: it fills a gap from its start, aligned to its row",
          "[core][layout]") {
  // rows 4, 6, 1 -> chunk 12; (2,) has numel 2 < 12: a fragment. (5,4) at 0: rem 8, gap
  // from 20, next 24; the only later regular tensor, (2,6), has no remainder: no closer.
  // The fragment fills the gap from its start, at 20 (a closer would sit at 24 - 2 = 22).
  // (2,6) at 24 -> 36. D = 2: size = round_up(36, 24) = 48.
  auto l = GlobalLayout::create({{5, 4}, {2, 6}, {2}}, 2).value();
  REQUIRE(offsets(l) == std::vector<int64_t>{0, 24, 20});
  REQUIRE(l.size() == 48);
  // (1,6) instead: rounded up to its row 6 it would start at 24, past the gap [20, 24), so it
  // goes to the tail: 24 + 12 = 36 is already a multiple of 6. size = round_up(42, 24) = 48.
  auto t = GlobalLayout::create({{5, 4}, {2, 6}, {1, 6}}, 2).value();
  REQUIRE(offsets(t) == std::vector<int64_t>{0, 24, 36});
  REQUIRE(t.size() == 48);
}

TEST_CASE("a closer is not placed again when its own turn comes", "[core][layout]") {
  // rows 4, 4, 6, 6 -> chunk 12; numel 20, 28, 12, 30.
  // (5,4) at 0: rem 8, next 24; (7,4): crem 28 % 12 = 4, 8 + 4 = 12, at 24 - 4 = 20;
  //   next += 28 - 4 -> 48. In its own turn (7,4) is skipped.
  // (2,6): a multiple of 12, at 48 -> 60.
  // (5,6): rem 6, at 60, gap from 90, next = 60 + 36 = 96; no later tensor: gap [90, 96).
  // D = 2: size = round_up(96, 24) = 96.
  auto l = GlobalLayout::create({{5, 4}, {7, 4}, {2, 6}, {5, 6}}, 2).value();
  REQUIRE(offsets(l) == std::vector<int64_t>{0, 20, 48, 60});
  REQUIRE(l.size() == 96);
  REQUIRE(l.unused() == std::vector<ElementRange>{{90, 96}});
}

// The property: on many seeded random shape lists (1-D, 2-D and 3-D, rows drawn so chunks
// stay small and remainders are common), core's layout has exactly the offsets and size of
// the independent implementation above. It fails on any departure from the semantics.md text in
// either, and it counts the closers and gap fragments it saw, so it cannot pass on lists that
// never reach the rule.
TEST_CASE("the layout equals an independent implementation of docs/semantics.md section 2",
          "[core][layout]") {
  // The reference itself first: the semantics.md conformance examples and one hand example.
  REQUIRE(spec::layout({{5, 4}, {2, 6}, {3}}, 2).offsets == std::vector<int64_t>{0, 24, 20});
  REQUIRE(spec::layout({{5, 4}, {2, 6}, {3}}, 2).size == 48);
  REQUIRE(spec::layout({{4, 4}, {1, 6}}, 2).offsets == std::vector<int64_t>{0, 18});
  REQUIRE(spec::layout({{4, 4}, {1, 6}}, 2).size == 24);
  REQUIRE(spec::layout({{5, 4}, {7, 3}, {5, 3}, {4, 4}}, 1).offsets == std::vector<int64_t>{0, 36, 21, 60});
  const int64_t rows[] = {1, 2, 3, 4, 6, 8, 12};
  Rng rng(0x1a7017);
  int closers = 0, gap_fragments = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng.uniform(8));
    const int ranks = 1 + static_cast<int>(rng.uniform(8));
    std::vector<Shape> shapes;
    for (int i = 0; i < n; ++i) {
      const int64_t row = rows[rng.uniform(std::size(rows))];
      const int64_t dim0 = rng.uniform_int(1, 12);
      const uint64_t dims = 1 + rng.uniform(3);
      if (dims == 1) {
        shapes.push_back({dim0 * row});  // its row is 1; dim0 * row keeps chunk multiples common
      } else if (dims == 2) {
        shapes.push_back({dim0, row});
      } else {  // the row split over two dims where it can be
        shapes.push_back(row % 2 == 0 ? Shape{dim0, 2, row / 2} : Shape{dim0, 1, row});
      }
    }
    const spec::Layout want = spec::layout(shapes, ranks);
    const GlobalLayout got = GlobalLayout::create(shapes, ranks).value();
    std::string listed;
    for (const Shape& s : shapes) listed += to_string(s) + " ";
    INFO("trial " << trial << ": shapes " << listed << "over " << ranks << " ranks");
    REQUIRE(offsets(got) == want.offsets);
    REQUIRE(got.size() == want.size);
    closers += want.closers;
    gap_fragments += want.gap_fragments;
  }
  // Seed 0x1a7017 sees about a thousand of each.
  REQUIRE(closers > 500);
  REQUIRE(gap_fragments > 500);
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
  REQUIRE(owned_rows(l, flat_range(l, 0)) == std::vector<OwnedRows>{{0, 0, 5, 0}, {2, 0, 3, 20}});
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

TEST_CASE("rows whose lcm passes 2^40 are refused, not wrapped into a negative chunk", "[core][layout]") {
  // 2^39 and 2^39 - 1 are coprime: their lcm is near 2^78, which std::lcm wrapped to a
  // negative int64 that the 2^40 check after it let through.
  const int64_t big = int64_t{1} << 39;
  auto l = GlobalLayout::create({{1, big}, {1, big - 1}}, 1);
  REQUIRE_FALSE(l.ok());
  REQUIRE_THAT(l.error().message(),
               Catch::Contains("the chunk, the lcm of the row sizes (549755813888 and tensor 1's "
                               "549755813887), exceeds 2^40 elements"));
  // Up to 2^40 the same check lets it through: rows 2^20 and 2^20 - 1 have an lcm just under 2^40.
  auto fits = GlobalLayout::create({{1, int64_t{1} << 20}, {1, (int64_t{1} << 20) - 1}}, 1);
  REQUIRE(fits.ok());
  REQUIRE(fits->chunk() == (int64_t{1} << 20) * ((int64_t{1} << 20) - 1));
  REQUIRE(fits->size() % fits->chunk() == 0);
}
