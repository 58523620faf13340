// The collective-sequence comparison behind `shardcheck compare --capture`: alignment on what
// a collective is on the wire, one report per collective only one side issues, and the reduce
// op and streams checked on aligned pairs.
#include <catch2/catch.hpp>

#include "run/fidelity.hpp"

using namespace shardcheck;
using run::CollectiveSequence;
using run::SequenceDifference;
using K = SequenceDifference::Kind;

namespace {

sim::IssuedCollective coll(core::CollectiveKind kind, int64_t in, int64_t out, std::string stream,
                           std::string tag = "t", core::ReduceOp reduce = core::ReduceOp::sum) {
  sim::IssuedCollective c;
  c.kind = kind;
  c.members = {0, 1};
  c.in_numel = in;
  c.out_numel = out;
  c.stream = std::move(stream);
  c.tag = std::move(tag);
  c.reduce = reduce;
  return c;
}

constexpr auto AG = core::CollectiveKind::all_gather;
constexpr auto RS = core::CollectiveKind::reduce_scatter;
constexpr auto AR = core::CollectiveKind::all_reduce;

}  // namespace

TEST_CASE("equal sequences under different stream names compare equal", "[fidelity]") {
  const CollectiveSequence captured = {coll(AG, 4, 8, "stream A"), coll(RS, 8, 4, "stream B")};
  const CollectiveSequence modeled = {coll(AG, 4, 8, "ag"), coll(RS, 8, 4, "rs")};
  const auto r = run::compare_sequences({captured, captured}, {modeled, modeled});
  REQUIRE(r.equal());
  REQUIRE(r.ranks.size() == 2);
  REQUIRE(r.ranks[1].captured == 2);
}

TEST_CASE("a collective only one side issues is one difference, not a shift of the rest", "[fidelity]") {
  const CollectiveSequence captured = {coll(AG, 4, 8, "s"), coll(RS, 8, 4, "s"), coll(AG, 2, 4, "s")};
  const CollectiveSequence modeled = {coll(AR, 1, 1, "c", "grad_norm"), coll(AG, 4, 8, "s"),
                                      coll(RS, 8, 4, "s"), coll(AG, 2, 4, "s")};
  const auto r = run::compare_sequences({captured}, {modeled});
  REQUIRE_FALSE(r.equal());
  REQUIRE(r.ranks[0].differences.size() == 1);
  REQUIRE(r.ranks[0].differences[0].kind == K::modeled_only);
  REQUIRE(r.ranks[0].differences[0].modeled == 0);
  const auto lines = run::summarize(r, {captured}, {modeled});
  REQUIRE(lines == std::vector<std::string>{"1 x modeled only: all_reduce 'grad_norm'"});
}

TEST_CASE("aligned collectives must agree on the reduce op and keep streams one to one", "[fidelity]") {
  SECTION("reduce op") {
    const auto r = run::compare_sequences({{coll(RS, 8, 4, "s", "t", core::ReduceOp::avg)}},
                                          {{coll(RS, 8, 4, "s", "t", core::ReduceOp::sum)}});
    REQUIRE(r.ranks[0].differences.size() == 1);
    REQUIRE(r.ranks[0].differences[0].kind == K::differs);
    REQUIRE(r.ranks[0].differences[0].what == "reduce op avg vs sum");
  }
  SECTION("one captured stream carrying what the model puts on two") {
    const auto r = run::compare_sequences({{coll(AG, 4, 8, "comm"), coll(RS, 8, 4, "comm")}},
                                          {{coll(AG, 4, 8, "ag"), coll(RS, 8, 4, "rs")}});
    REQUIRE(r.ranks[0].differences.size() == 1);
    REQUIRE(r.ranks[0].differences[0].captured == 1);
    REQUIRE_THAT(r.ranks[0].differences[0].what, Catch::Contains("stream 'comm' vs 'rs'"));
  }
}

TEST_CASE("different shapes do not align and rank counts must match", "[fidelity]") {
  const auto r = run::compare_sequences({{coll(AG, 4, 8, "s")}}, {{coll(AG, 5, 10, "s")}});
  REQUIRE(r.ranks[0].differences.size() == 2);
  REQUIRE(run::compare_sequences({{}, {}}, {{}}).problem == "the capture has 2 ranks and the scenario 1");
  REQUIRE_FALSE(run::compare_sequences({{}, {}}, {{}}).equal());
}
