// Reports and traces of real runs that must agree with themselves: compare's report carries its
// time and findings, a training replay's trace places each finding on its step and carries
// slice arguments and memory counters, and a cut trace says it was cut.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/support/run_command.hpp"

using shardcheck::testing::run_shardcheck;

namespace {
std::string catalog(const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/catalog/" + name;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}
}  // namespace

TEST_CASE("compare's report shows the time it took and what the training's checks found",
          "[cli][compare][report]") {
  const std::string dir = "/tmp/shardcheck-compare-found-test";
  std::filesystem::remove_all(dir);
  auto r = run_shardcheck("compare " + catalog("zero1-missing-no-sync.yaml") + " --report " + dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);  // exact mode, weights differ
  const auto j = read_json(dir + "/report.json");
  const auto& s = j["scenarios"][0];
  REQUIRE(s["seconds"].get<double>() > 0);
  REQUIRE(s["found"] == nlohmann::json::array({"numerics_divergence"}));
  REQUIRE_FALSE(s["findings"].empty());
  REQUIRE_THAT(s["compare"]["schedule"].get<std::string>(), Catch::StartsWith("seed "));
  REQUIRE(s["checked"]["collectives"].get<int64_t>() > 0);
  REQUIRE(s["checked"]["training_steps"] == s["compare"]["series"][0]["losses"].size());
  std::ifstream md(dir + "/report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  REQUIRE_THAT(text, !Catch::Contains("found none"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a training replay's trace places findings on their step, with slice args and memory counters",
          "[cli][replay][trace]") {
  const std::string path = "/tmp/shardcheck-training-trace-test.json";
  auto r =
      run_shardcheck("replay " + catalog("stale-model-weight-after-step.yaml") + " --seed 1 --trace " + path);
  INFO(r.out << r.err);
  const auto j = read_json(path);
  std::filesystem::remove(path);
  std::map<std::pair<int, int64_t>, std::string> marks;
  std::set<std::pair<int, std::string>> pools;
  int with_buffer = 0, with_group = 0, findings = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string cat = e.value("cat", "");
    if (cat == "mark") marks[{e["pid"].get<int>(), e["ts"].get<int64_t>()}] = e["name"];
    if (e["ph"] == "C") pools.insert({e["pid"].get<int>(), e["name"].get<std::string>()});
    if (e["ph"] == "X" && e["args"].contains("buffer")) {
      ++with_buffer;
      REQUIRE(e["args"]["lifetime"].get<int>() >= 1);
      REQUIRE(e["args"].contains("bytes"));
    }
    if (e["ph"] == "X" && e["args"].contains("group")) {
      ++with_group;
      REQUIRE(e["args"]["seq"].get<int64_t>() >= 0);
    }
  }
  for (const auto& e : j["traceEvents"]) {
    if (e.value("cat", "") != "finding") continue;
    ++findings;
    REQUIRE(e["ts"].get<int64_t>() > 0);
    const auto m = marks.find({e["pid"].get<int>(), e["ts"].get<int64_t>()});
    REQUIRE(m != marks.end());
    REQUIRE_THAT(m->second, Catch::StartsWith("end of step "));
  }
  REQUIRE(findings >= 1);
  REQUIRE(with_buffer > 100);
  REQUIRE(with_group > 10);
  REQUIRE(pools.count({0, "memory compute"}) == 1);
  REQUIRE(pools.size() >= 4);  // several pools on each of two ranks
}

TEST_CASE("a training trace in a report that is cut to a window says so", "[cli][report][trace]") {
  const std::string dir = "/tmp/shardcheck-cut-trace-test";
  std::filesystem::remove_all(dir);
  auto r = run_shardcheck("run " + catalog("stale-model-weight-after-step.yaml") + " --report " + dir);
  REQUIRE(r.exit_code == 0);
  const auto j = read_json(dir + "/trace-stale-model-weight-after-step-0.json");
  std::ifstream md(dir + "/report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  std::filesystem::remove_all(dir);
  // The page says so too, beside the trace's name.
  REQUIRE_THAT(text, Catch::Contains("slices (the 4000 slices around the operation the finding concerns)"));
  REQUIRE(j["otherData"].contains("cut"));
  const auto& cut = j["otherData"]["cut"];
  int slices = 0, markers = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") ++slices;
    if (e.value("cat", "") == "trace_cut") ++markers;
  }
  REQUIRE(cut["slices_shown"] == slices);
  REQUIRE(cut["slices_total"].get<int>() ==
          slices + cut["dropped_before"].get<int>() + cut["dropped_after"].get<int>());
  REQUIRE(markers == (cut["dropped_before"].get<int>() > 0) + (cut["dropped_after"].get<int>() > 0));
  REQUIRE(markers >= 1);
}
