// What a report's timelines cost, counted rather than timed: each seed with findings is replayed
// once, and each finding's timeline builds only its window of the run, so a long capture with
// many findings costs the windows it shows, not findings x records. The windows are the same
// as when they were cut from the whole run's timeline.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/check/findings.hpp"
#include "run/report.hpp"
#include "run/scenario_run.hpp"
#include "sim/explore.hpp"

using namespace shardcheck;

namespace {

// One rank: `clean` race-free operations on the default stream, then `races` pairs of lines
// whose second reads on a side stream what the first wrote, unordered.
std::string long_capture(int clean, int races) {
  const std::string dir = "/tmp/shardcheck-report-cost-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream out(dir + "/rank-0.jsonl");
  int64_t n = 0;
  auto rec = [&](const std::string& r) { out << r << "\n", ++n; };
  out << R"({"shardcheck_capture": 1, "rank": 0, "world_size": 1, "torch": "2.1", "device": "x", "argv": ["p.py"]})"
      << "\n";
  rec(R"({"k": "stream", "id": 0, "name": "default"})");
  rec(R"({"k": "stream", "id": 1, "name": "side"})");
  rec(R"({"k": "site", "id": 0, "file": "p.py", "line": 1, "func": "main"})");
  rec(R"({"k": "alloc", "buf": 0, "bytes": 4096, "stream": 0, "at": 0})");
  for (int i = 0; i < clean; ++i)
    rec(R"({"k": "op", "name": "aten::add_", "stream": 0, "r": [[0, 0, 4096]], "w": [[0, 0, 4096]], "at": 0})");
  for (int i = 0; i < races; ++i) {
    const std::string b = std::to_string(1 + i), s1 = std::to_string(1 + 2 * i),
                      s2 = std::to_string(2 + 2 * i);
    rec(R"({"k": "site", "id": )" + s1 + R"(, "file": "p.py", "line": )" + std::to_string(10 + 2 * i) +
        R"(, "func": "main"})");
    rec(R"({"k": "alloc", "buf": )" + b + R"(, "bytes": 4096, "stream": 0, "at": )" + s1 + "}");
    rec(R"({"k": "op", "name": "aten::fill_", "stream": 0, "r": [], "w": [[)" + b + R"(, 0, 4096]], "at": )" +
        s1 + "}");
    rec(R"({"k": "site", "id": )" + s2 + R"(, "file": "p.py", "line": )" + std::to_string(11 + 2 * i) +
        R"(, "func": "main"})");
    rec(R"({"k": "op", "name": "aten::sum", "stream": 1, "r": [[)" + b +
        R"(, 0, 4096]], "w": [[0, 0, 4]], "at": )" + s2 + "}");
  }
  rec(R"({"k": "device_sync", "at": 0})");
  out << R"({"k": "end", "records": )" << n << "}\n";
  return dir;
}

}  // namespace

TEST_CASE(
    "a report of many findings after a long race-free run replays each seed once and builds only the "
    "windows it shows, the same windows the whole timeline gave",
    "[run][report]") {
  const int races = 12;
  const std::string dir = long_capture(30000, races);
  const auto s = run::load_scenario(dir);
  REQUIRE(s);
  run::ScheduleOverrides o;
  o.runs = 2;
  o.jobs = 1;
  run::ReportCost cost;
  const run::CheckedRun c = run::run_checked(*s, o, false, run::ResultOptions{.traces = true, .cost = &cost});
  REQUIRE(c.error.empty());
  REQUIRE(c.result);
  const auto& findings = c.result->findings;
  // Each pair of lines races twice: the read of what the first wrote, and the side stream's
  // write of the sum over what the race-free operations wrote.
  REQUIRE(findings.size() == static_cast<size_t>(2 * races));
  // Every finding was first seen on the first seed: one replay, not one per finding.
  REQUIRE(cost.replays == 1);
  const core::TraceLog& first = c.result->finding_traces.front();
  const int64_t run_slices = first.cut.slices_total;
  REQUIRE(run_slices > 60000);  // the clean operations, issued and run
  // Each race's window is 200 scheduler steps either side of its accesses: a few hundred slices.
  REQUIRE(cost.slices <= static_cast<int64_t>(findings.size()) * 1000);
  REQUIRE(cost.slices < run_slices / 4);

  // The windows are those the whole run's timeline gives: the same slices at the same places.
  sim::Options opt = run::options_for(*s, o).value();
  opt.seed = findings.front().seed;
  const sim::Replay whole = sim::replay(s->factory, opt);
  REQUIRE(static_cast<int64_t>(whole.log.slices.size()) == run_slices);
  for (size_t i = 0; i < findings.size(); ++i) {
    const core::TraceLog& t = c.result->finding_traces[i];
    INFO("finding " << i);
    REQUIRE_FALSE(t.slices.empty());
    REQUIRE(t.cut.dropped_before + static_cast<int64_t>(t.slices.size()) + t.cut.dropped_after == run_slices);
    for (size_t k = 0; k < t.slices.size(); ++k) {
      const auto& want = whole.log.slices[static_cast<size_t>(t.cut.dropped_before) + k];
      REQUIRE(t.slices[k].ts_us == want.ts_us);
      REQUIRE(t.slices[k].name == want.name);
      REQUIRE(t.slices[k].buffers == want.buffers);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("twenty thousand distinct findings, and one found twenty thousand times, merge in linear time",
          "[run][findings]") {
  // Merged by a search of the list, 20 000 findings took minutes; the test would time out.
  std::vector<core::Finding> many;
  for (int i = 0; i < 20000; ++i) {
    core::Finding f;
    f.key = "race|" + std::to_string(i);
    f.spread = core::spread_of(f.key, 0, {"s"});
    many.push_back(f);
  }
  core::FindingList list;
  for (int round = 0; round < 2; ++round)
    for (const auto& f : many) list.add(f);
  REQUIRE(list.size() == 20000);
  REQUIRE(list[19999].occurrences == 2);
  std::vector<core::Finding> merged = many;
  core::add_findings(merged, many);
  REQUIRE(merged.size() == 20000);
  REQUIRE(merged[123].occurrences == 2);
  core::FindingList one;
  for (int i = 0; i < 20000; ++i) {
    core::Finding f;
    f.key = "race|same";
    f.spread = core::spread_of("instance " + std::to_string(i), i % 8, {"s"});
    one.add(std::move(f));
  }
  REQUIRE(one.size() == 1);
  REQUIRE(one[0].occurrences == 20000);
  REQUIRE(one[0].spread.instances.size() == 20000);
  REQUIRE(one[0].spread.ranks.size() == 8);
  core::fold_symptoms(merged);
  REQUIRE(merged.size() == 20000);
}
