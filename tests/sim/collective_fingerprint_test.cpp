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
