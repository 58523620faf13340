// InlineVector: values stay in the object up to N and move to the heap past it, and copies,
// moves and self-referencing pushes keep every value, on either side of that line.
#include <catch2/catch.hpp>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/base/inline_vector.hpp"

using namespace shardcheck::core;

namespace {

struct Rec {
  uint32_t a = 7;
  uint64_t b = 0;
  friend bool operator==(const Rec&, const Rec&) = default;
};

template <size_t N>
std::vector<int> values(const InlineVector<int, N>& v) {
  return {v.begin(), v.end()};
}

}  // namespace

TEST_CASE("an InlineVector keeps N values inline and goes to the heap past them", "[core][inline_vector]") {
  InlineVector<int, 3> v;
  REQUIRE(v.empty());
  REQUIRE_FALSE(v.on_heap());
  for (int i = 0; i < 3; ++i) v.push_back(i);
  REQUIRE_FALSE(v.on_heap());
  REQUIRE(v.capacity() == 3);
  v.push_back(3);  // the fourth: to the heap, the first three carried over
  REQUIRE(v.on_heap());
  REQUIRE(values(v) == std::vector<int>{0, 1, 2, 3});
  for (int i = 4; i < 100; ++i) v.push_back(i);
  REQUIRE(v.size() == 100);
  for (int i = 0; i < 100; ++i) REQUIRE(v[static_cast<size_t>(i)] == i);
  v.clear();
  REQUIRE(v.empty());
  v.push_back(5);
  REQUIRE(values(v) == std::vector<int>{5});
}

TEST_CASE("InlineVector copies and moves keep every value, inline and on the heap", "[core][inline_vector]") {
  for (const int n : {0, 1, 2, 5, 40}) {
    InlineVector<int, 2> v;
    for (int i = 0; i < n; ++i) v.push_back(10 * i);
    const std::vector<int> want = values(v);
    InlineVector<int, 2> copy = v;
    REQUIRE(values(copy) == want);
    REQUIRE(copy == v);
    if (n > 0) {
      copy[0] = -1;  // a copy owns its values
      REQUIRE(v[0] == 0);
      REQUIRE_FALSE(copy == v);
    }
    InlineVector<int, 2> moved = std::move(v);
    REQUIRE(values(moved) == want);
    REQUIRE(v.empty());  // NOLINT(bugprone-use-after-move): a moved-from vector is empty
    REQUIRE_FALSE(v.on_heap());
    v.push_back(1);  // and usable
    REQUIRE(values(v) == std::vector<int>{1});
    InlineVector<int, 2> assigned;
    for (int i = 0; i < 9; ++i) assigned.push_back(i);  // on the heap before it is assigned
    assigned = moved;
    REQUIRE(values(assigned) == want);
    assigned = std::move(moved);
    REQUIRE(values(assigned) == want);
    InlineVector<int, 2>& same = assigned;
    assigned = same;  // self-assignment keeps the values
    REQUIRE(values(assigned) == want);
  }
}

TEST_CASE("InlineVector resize, assign and a push of its own element", "[core][inline_vector]") {
  InlineVector<int, 2> v(3, 4);
  REQUIRE(values(v) == std::vector<int>{4, 4, 4});
  v.resize(1);
  REQUIRE(values(v) == std::vector<int>{4});
  v.resize(3, 9);
  REQUIRE(values(v) == std::vector<int>{4, 9, 9});
  v.assign(2, 1);
  REQUIRE(values(v) == std::vector<int>{1, 1});
  InlineVector<int, 2> w;
  w.push_back(6);
  w.push_back(7);
  w.push_back(w[0]);  // grows while the value it copies lives in the old storage
  REQUIRE(values(w) == std::vector<int>{6, 7, 6});
  InlineVector<Rec, 1> r;
  r.emplace_back(Rec{1, 2});
  r.emplace_back();  // value-initialized: the member defaults hold
  REQUIRE(r[0] == Rec{1, 2});
  REQUIRE(r[1].a == 7);
  r.pop_back();
  REQUIRE(r.size() == 1);
}
