// Every shipped trace scenario meets its expectation under every schedule policy and several
// seeds: races are found from happens-before, not from a lucky schedule, and the fixed
// programs produce no false positives.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "run/scenario_run.hpp"

using namespace shardcheck;

namespace {
std::vector<std::string> trace_files() {
  std::vector<std::string> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace")) {
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}
}  // namespace

TEST_CASE("at least a dozen trace scenarios ship, race and fix alike", "[sim][scenarios]") {
  const auto files = trace_files();
  REQUIRE(files.size() >= 12);
  int clean = 0, buggy = 0;
  for (const auto& f : files) {
    auto s = run::load_scenario(f);
    REQUIRE(s.ok());
    (s->expect.findings.empty() ? clean : buggy)++;
  }
  REQUIRE(clean >= 5);
  REQUIRE(buggy >= 7);
}

TEST_CASE("every trace scenario meets its expectation under every policy", "[sim][scenarios]") {
  for (const auto& file : trace_files()) {
    auto s = run::load_scenario(file);
    REQUIRE(s.ok());
    for (const char* policy : {"in_order", "random", "pct", "delay_comm"}) {
      run::ScheduleOverrides o;
      o.policy = policy;
      o.runs = 5;
      const run::ScenarioOutcome out = run::run_scenario(*s, o);
      INFO(file << " under " << policy << ": found " << core::kinds_to_string(out.judged.found));
      REQUIRE(out.explored.error.empty());
      REQUIRE(out.judged.met);
    }
  }
}

TEST_CASE("the upstream race names both accesses, both lifetimes and the fixes", "[sim][scenarios]") {
  auto s = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/reuse-race.yaml");
  REQUIRE(s.ok());
  const auto out = run::run_scenario(*s, {});
  REQUIRE(out.explored.findings.size() == 1);
  const core::Finding& f = out.explored.findings[0];
  REQUIRE(f.kind == core::FindingKind::stream_race);
  const auto& d = std::get<core::RaceDetail>(f.detail);
  REQUIRE(d.reuse);
  REQUIRE(d.first.stream == "rs");
  REQUIRE(d.first.buffer == "grad");
  REQUIRE(d.first.lifetime == 1);
  REQUIRE_FALSE(d.first.write);
  REQUIRE(d.second.stream == "compute");
  REQUIRE(d.second.buffer == "act");
  REQUIRE(d.second.lifetime == 2);
  REQUIRE(d.first.address == d.second.address);
  REQUIRE(d.fixes.size() == 4);
  REQUIRE_THAT(d.fixes[0], Catch::Contains("record_stream('grad', 'rs')"));
  REQUIRE_THAT(d.fixes[1], Catch::Contains("allocate 'grad' on 'rs'"));
  REQUIRE_THAT(d.fixes[2], Catch::Contains("wait for an event recorded on 'rs'"));
  REQUIRE_THAT(d.fixes[3], Catch::Contains("persistent"));
  REQUIRE(f.occurrences >= 2);  // both ranks, every schedule: one finding
}

TEST_CASE("a deadlock reports the cycle through both ranks", "[sim][scenarios]") {
  auto s =
      run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/cross-group-deadlock.yaml");
  REQUIRE(s.ok());
  const auto out = run::run_scenario(*s, {});
  REQUIRE(out.explored.findings.size() == 1);
  const auto& d = std::get<core::DeadlockDetail>(out.explored.findings[0].detail);
  REQUIRE(d.is_cycle);
  REQUIRE(d.cycle.size() == 2);
  REQUIRE(d.cycle[0].rank != d.cycle[1].rank);
  REQUIRE(d.cycle[0].where == "comm");
}

TEST_CASE("a mismatch stops the run without a second, spurious deadlock finding", "[sim][scenarios]") {
  auto s =
      run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/collective-mismatch.yaml");
  REQUIRE(s.ok());
  const auto out = run::run_scenario(*s, {});
  REQUIRE(out.explored.findings.size() == 1);
  const auto& d = std::get<core::CollectiveDetail>(out.explored.findings[0].detail);
  REQUIRE(d.ranks.size() == 2);
  REQUIRE(d.ranks[0].fingerprint != d.ranks[1].fingerprint);
}

TEST_CASE("one order bug is one finding, and the collectives it shifts are its consequences",
          "[sim][scenarios]") {
  // Rank 1 issues the first of six all-gathers last: all six positions of 'dp' differ, from one
  // cause. The first is the finding; the other five are counted and listed in it.
  auto s = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) +
                              "/scenarios/trace/collective-order-cascade.yaml");
  REQUIRE(s.ok());
  for (const char* policy : {"in_order", "random", "pct", "delay_comm"}) {
    INFO(policy);
    run::ScheduleOverrides o;
    o.policy = policy;
    o.runs = 5;
    const auto out = run::run_scenario(*s, o);
    REQUIRE(out.judged.met);
    REQUIRE(out.explored.findings.size() == 1);
    const core::Finding& f = out.explored.findings[0];
    REQUIRE(f.kind == core::FindingKind::collective_mismatch);
    const auto& d = std::get<core::CollectiveDetail>(f.detail);
    REQUIRE(d.group == "dp");
    REQUIRE(d.index == 0);
    REQUIRE(d.consequences == 5);
    REQUIRE(d.later.size() == 5);
    for (size_t i = 0; i < d.later.size(); ++i) {
      REQUIRE(d.later[i].index == static_cast<int64_t>(i) + 1);
      REQUIRE(d.later[i].kind == core::FindingKind::collective_mismatch);
    }
    REQUIRE(d.later[0].what == "all_gather 'w1' on rank 0; all_gather 'w2' on rank 1");
    REQUIRE_THAT(f.explanation,
                 Catch::Contains("Then 5 later collectives of group 'dp' diverge as a consequence"));
    REQUIRE_THAT(f.explanation, Catch::Contains("#1: all_gather 'w1' on rank 0; all_gather 'w2' on rank 1"));
    REQUIRE_THAT(f.explanation, Catch::Contains("... and 1 more"));
  }
}

TEST_CASE("the post-step sync order bug is one collective finding per group, with its consequences",
          "[sim][scenarios]") {
  auto s = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) +
                              "/scenarios/catalog/post-step-sync-set-order.yaml");
  REQUIRE(s.ok());
  const auto out = run::run_scenario(*s, {});
  REQUIRE(out.judged.met);
  std::set<std::string> groups;
  int64_t consequences = 0;
  for (const auto& f : out.explored.findings) {
    REQUIRE(
        (f.kind == core::FindingKind::collective_mismatch || f.kind == core::FindingKind::collective_swap));
    const auto& d = std::get<core::CollectiveDetail>(f.detail);
    REQUIRE(groups.insert(d.group).second);  // one finding per group
    consequences += d.consequences;
  }
  REQUIRE(out.explored.findings.size() == 1);
  REQUIRE(consequences >= 4);
}

namespace {
std::vector<core::Finding> races_of(const std::string& name, const char* policy, int runs) {
  auto s = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/" + name + ".yaml");
  REQUIRE(s.ok());
  run::ScheduleOverrides o;
  o.policy = policy;
  o.runs = runs;
  const auto out = run::run_scenario(*s, o);
  std::vector<core::Finding> races;
  for (const auto& f : out.explored.findings) {
    if (f.kind == core::FindingKind::stream_race) races.push_back(f);
  }
  return races;
}
}  // namespace

TEST_CASE("a race is one finding, oriented by issue order, in every execution order", "[sim][scenarios]") {
  for (const char* policy : {"in_order", "random", "pct", "delay_comm"}) {
    INFO(policy);
    const auto races = races_of("cross-stream-read-race", policy, 10);
    REQUIRE(races.size() == 1);
    const auto& d = std::get<core::RaceDetail>(races[0].detail);
    REQUIRE(d.first.op == "kernel 'produce'");
    REQUIRE(d.first.stream == "side");
    REQUIRE(d.second.op == "kernel 'consume'");
    REQUIRE_THAT(d.fixes[0], Catch::Contains("record an event on 'side' after kernel 'produce'"));
    REQUIRE_THAT(d.fixes[0], Catch::Contains("make 'compute' wait for it"));
  }
  // The upstream race under delay_comm: the reduce-scatter runs last, yet it was issued first.
  const auto races = races_of("reuse-race", "delay_comm", 10);
  REQUIRE(races.size() == 1);
  REQUIRE(std::get<core::RaceDetail>(races[0].detail).first.stream == "rs");
}

TEST_CASE("races on buffers whose names differ only in digits stay distinct", "[sim][scenarios]") {
  const auto races = races_of("distinct-buffer-races", "random", 4);
  REQUIRE(races.size() == 10);
  for (const auto& f : races) REQUIRE(f.occurrences == 4);  // true repeats: one per schedule
}

TEST_CASE("two operations racing one reused block are two findings", "[sim][scenarios]") {
  const auto races = races_of("reuse-two-readers", "random", 10);
  REQUIRE(races.size() == 2);
  REQUIRE(std::get<core::RaceDetail>(races[0].detail).first.op !=
          std::get<core::RaceDetail>(races[1].detail).first.op);
}

TEST_CASE("a split block's reuse names the later lifetime of its bytes", "[sim][scenarios]") {
  const auto races = races_of("split-block-reuse", "random", 10);
  bool b_seen = false;
  for (const auto& f : races) {
    const auto& d = std::get<core::RaceDetail>(f.detail);
    REQUIRE(d.second.lifetime > d.first.lifetime);
    if (d.second.buffer == "b") {
      b_seen = true;
      REQUIRE(d.first.address != d.second.address);
      REQUIRE_THAT(f.summary, Catch::Contains("(lifetime 1) is reused by 'b' (lifetime 2)"));
    }
  }
  REQUIRE(b_seen);
}

TEST_CASE("a wait issued before its event is recorded is said to wait for nothing", "[sim][scenarios]") {
  const auto races = races_of("wait-before-record", "random", 10);
  REQUIRE(races.size() == 1);
  const auto& d = std::get<core::RaceDetail>(races[0].detail);
  REQUIRE_THAT(d.missing_edge, Catch::Contains("before 'x_ready' is ever recorded"));
  REQUIRE_THAT(d.missing_edge, !Catch::Contains("never waits"));
}
