// What the collective fingerprint holds, field by field: each shipped mismatch scenario differs
// across its ranks in exactly one field (reduce op, broadcast root, dtype), and that field is
// what the finding shows; its fixed twin runs clean. Member lists that disagree cannot reach
// the fingerprint: the simulator keys a group by its name and members, so such ranks never
// meet in one collective, and the run is reported as the hang it is on NCCL.
#include <catch2/catch.hpp>

#include "run/scenario_run.hpp"
#include "sim/world.hpp"

using namespace shardcheck;

namespace {

std::string trace(const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/" + name;
}

run::ScenarioOutcome run_file(const std::string& file) {
  auto s = run::load_scenario(file);
  REQUIRE(s.ok());
  return run::run_scenario(*s, {});
}

}  // namespace

TEST_CASE("each mismatch scenario differs in one fingerprint field, and its fix in none",
          "[sim][scenarios][fingerprint]") {
  struct Pair {
    const char* bug;
    const char* rank0;  // the field as rank 0's fingerprint shows it
    const char* rank1;
  };
  for (const Pair& p : {Pair{"collective-mismatch-reduce-op", " sum on ", " avg on "},
                        Pair{"collective-mismatch-root", " root 0 on ", " root 1 on "},
                        Pair{"collective-mismatch-dtype", "all_reduce f32 ", "all_reduce i32 "}}) {
    INFO(p.bug);
    const run::ScenarioOutcome bug = run_file(trace(std::string(p.bug) + ".yaml"));
    REQUIRE(bug.explored.findings.size() == 1);
    const core::Finding& f = bug.explored.findings[0];
    REQUIRE(f.kind == core::FindingKind::collective_mismatch);
    const auto& d = std::get<core::CollectiveDetail>(f.detail);
    REQUIRE(d.ranks.size() == 2);
    REQUIRE_THAT(d.ranks[0].fingerprint, Catch::Contains(p.rank0));
    REQUIRE_THAT(d.ranks[1].fingerprint, Catch::Contains(p.rank1));
    // Everything else agrees: the same tag and, once the differing field is taken out, the
    // same fingerprint.
    REQUIRE(d.ranks[0].tag == d.ranks[1].tag);
    std::string a = d.ranks[0].fingerprint, b = d.ranks[1].fingerprint;
    a.replace(a.find(p.rank0), std::string(p.rank0).size(), "|");
    b.replace(b.find(p.rank1), std::string(p.rank1).size(), "|");
    REQUIRE(a == b);
    const run::ScenarioOutcome fixed = run_file(trace(std::string(p.bug) + "-fixed.yaml"));
    REQUIRE(fixed.explored.error.empty());
    REQUIRE(fixed.explored.findings.empty());
    REQUIRE(fixed.judged.met);
  }
}

TEST_CASE("ranks that disagree on a group's members never meet in one collective: a deadlock, not a pass",
          "[sim][fingerprint]") {
  // A trace file cannot say this (its groups have one member list for every rank), so the
  // ranks call the Runtime directly. Rank 0 builds 'dp' as {0, 1}; ranks 1 and 2 as {0, 1, 2}.
  // On NCCL the communicators disagree on their size and the collective never completes.
  sim::Options o;
  o.ranks = 3;
  sim::World w(o);
  const sim::RunResult r = w.run([](core::Runtime& rt) -> core::Task<> {
    const std::vector<int> members = rt.rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2};
    const core::GroupId dp = rt.group("dp", members);
    const core::StreamId s = rt.stream("comm");
    const core::BufferId x = co_await rt.alloc(1024, s, "x");
    co_await rt.launch(core::kernels::fill(s, core::TensorRef::f32(x, 0, 256), 1.0, "init"));
    co_await rt.collective({core::CollectiveKind::all_reduce, dp, s, core::TensorRef::f32(x, 0, 256),
                            core::TensorRef::f32(x, 0, 256), core::ReduceOp::sum, 0, "x"});
  });
  REQUIRE_FALSE(r.completed);
  REQUIRE(r.findings.size() == 1);
  REQUIRE(r.findings[0].kind == core::FindingKind::deadlock);
  REQUIRE_THAT(r.findings[0].explanation, Catch::Contains("group 'dp'"));
}

TEST_CASE("a mismatch's fix names the argument that differs, with what each rank passes",
          "[sim][scenarios][fingerprint]") {
  struct Case {
    const char* bug;
    const char* fix;
  };
  for (const Case& c : {Case{"collective-mismatch-reduce-op",
                             "make every member pass the same reduce op (rank 0 passes sum, rank 1 avg)"},
                        Case{"collective-mismatch-root",
                             "make every member name the same root (rank 0 passes root 0, rank 1 root 1)"},
                        Case{"collective-mismatch-dtype",
                             "make every member pass the same dtype (rank 0 passes f32, rank 1 i32)"}}) {
    INFO(c.bug);
    const run::ScenarioOutcome bug = run_file(trace(std::string(c.bug) + ".yaml"));
    REQUIRE(bug.explored.findings.size() == 1);
    const std::string& text = bug.explored.findings[0].explanation;
    REQUIRE_THAT(text, Catch::Contains(c.fix));
    REQUIRE_THAT(text, !Catch::Contains("order"));
  }
  // Different tensors at one position: the ranks issue their collectives in different orders.
  const run::ScenarioOutcome order = run_file(trace("collective-mismatch.yaml"));
  REQUIRE(order.explored.findings.size() == 1);
  REQUIRE_THAT(order.explored.findings[0].explanation, Catch::Contains("in the same order"));
}

TEST_CASE("the fix of an element count mismatch lists each rank's counts, several ranks to a value",
          "[sim][fingerprint]") {
  sim::Options o;
  o.ranks = 3;
  sim::World w(o);
  const sim::RunResult r = w.run([](core::Runtime& rt) -> core::Task<> {
    const std::vector<int> members{0, 1, 2};
    const core::GroupId dp = rt.group("dp", members);
    const core::StreamId s = rt.stream("comm");
    const core::BufferId x = co_await rt.alloc(1024, s, "x");
    const int64_t n = rt.rank() == 1 ? 128 : 256;
    co_await rt.launch(core::kernels::fill(s, core::TensorRef::f32(x, 0, 256), 1.0, "init"));
    co_await rt.collective({core::CollectiveKind::all_reduce, dp, s, core::TensorRef::f32(x, 0, n),
                            core::TensorRef::f32(x, 0, n), core::ReduceOp::sum, 0, "x"});
  });
  REQUIRE(r.findings.size() == 1);
  REQUIRE(r.findings[0].kind == core::FindingKind::collective_mismatch);
  REQUIRE_THAT(
      r.findings[0].explanation,
      Catch::Contains("make every member pass the same element counts (ranks 0 and 2 pass 256 in, 256 "
                      "out, rank 1 128 in, 128 out)"));
}

TEST_CASE("a send and its recv of different sizes: the fix names both sizes", "[sim][fingerprint]") {
  sim::Options o;
  o.ranks = 2;
  sim::World w(o);
  const sim::RunResult r = w.run([](core::Runtime& rt) -> core::Task<> {
    const core::StreamId s = rt.stream("comm");
    const core::BufferId x = co_await rt.alloc(1024, s, "x");
    co_await rt.launch(core::kernels::fill(s, core::TensorRef::f32(x, 0, 256), 1.0, "init"));
    if (rt.rank() == 0) {
      co_await rt.send({1, s, core::TensorRef::f32(x, 0, 256), "x", ""});
    } else {
      co_await rt.recv({0, s, core::TensorRef::f32(x, 0, 128), "x", ""});
    }
  });
  const auto it = std::find_if(r.findings.begin(), r.findings.end(), [](const core::Finding& f) {
    return f.kind == core::FindingKind::collective_mismatch;
  });
  REQUIRE(it != r.findings.end());
  REQUIRE_THAT(it->explanation, Catch::Contains("(rank 0 sends 1024, rank 1 receives 512)"));
}
