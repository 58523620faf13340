// The finding kind table (core/check/findings.hpp) is the one list of kinds: every row is
// whole, and each consumer (names, SARIF rules, the detectors a run lists, detector files, the
// value checks of a capture, `expect:`'s message, the fuzzer's dictionary) covers every kind,
// so a new kind that misses one fails here.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "core/check/findings.hpp"
#include "core/scenario/captured_values.hpp"
#include "core/scenario/trace_scenario.hpp"
#include "reports/ci_formats.hpp"
#include "run/report.hpp"
#include "run/scenario.hpp"
#include "sim/detector.hpp"

using namespace shardcheck;

TEST_CASE("every finding kind has one whole row: its name, family, meaning and who finds it",
          "[run][findings]") {
  std::set<std::string_view> names;
  for (int i = 0; i < core::kFindingKinds; ++i) {
    const core::FindingKindInfo& row = core::kFindingKindTable[i];
    INFO(row.name);
    REQUIRE(static_cast<int>(row.kind) == i);  // info(k) indexes the table
    REQUIRE(!row.name.empty());
    REQUIRE(names.insert(row.name).second);
    REQUIRE(core::parse_finding_kind(row.name) == row.kind);
    REQUIRE(core::to_string(row.kind) == row.name);
    REQUIRE(!row.family.empty());
    REQUIRE(row.meaning.size() > 20);
    if (row.found_by == core::FoundBy::detector) {
      const std::string file =
          std::string(SHARDCHECK_SOURCE_DIR) + "/sim/detect_" + std::string(row.family) + ".cpp";
      INFO(file);
      REQUIRE(std::filesystem::exists(file));
    }
  }
}

TEST_CASE("every detector family has one row in the simulator's detector table, and each row a kind",
          "[run][findings]") {
  std::set<std::string_view> families, rows;
  for (int i = 0; i < core::kFindingKinds; ++i) {
    const core::FindingKindInfo& row = core::kFindingKindTable[i];
    if (row.found_by == core::FoundBy::detector) families.insert(row.family);
  }
  for (const sim::DetectorEntry& e : sim::detector_table()) {
    INFO(e.family);
    REQUIRE(rows.insert(e.family).second);   // one row per family
    REQUIRE(families.count(e.family) == 1);  // it reports a kind of the table
    const auto d = e.make();
    REQUIRE(d != nullptr);
    REQUIRE(d->hooks() != 0);
  }
  REQUIRE(rows == families);
}

TEST_CASE("a training run against the reference looks for every kind, a trace run for the detectors' only",
          "[run][findings]") {
  auto training = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) +
                                     "/scenarios/catalog/grad-divisor-on-running-sum.yaml");
  REQUIRE(training.ok());
  auto trace = run::load_scenario(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/reuse-race.yaml");
  REQUIRE(trace.ok());
  const auto all = run::detectors_of(*training);
  const auto some = run::detectors_of(*trace);
  for (const auto& row : core::kFindingKindTable) {
    INFO(row.name);
    if (row.found_by == core::FoundBy::values)  // a captured program's values only
      REQUIRE(std::count(all.begin(), all.end(), std::string(row.name)) == 0);
    else if (training->training()->scenario.reference != "none" || row.found_by != core::FoundBy::reference)
      REQUIRE(std::count(all.begin(), all.end(), std::string(row.name)) == 1);
    REQUIRE(std::count(some.begin(), some.end(), std::string(row.name)) ==
            (row.found_by == core::FoundBy::detector ? 1 : 0));
  }
}

TEST_CASE("SARIF has a rule with its meaning for every kind a report holds", "[run][findings]") {
  reports::Report report;
  reports::ScenarioResult s;
  s.name = "all-kinds";
  s.file = "all-kinds.yaml";
  for (const auto& row : core::kFindingKindTable) {
    core::Finding f;
    f.kind = row.kind;
    f.summary = std::string(row.name) + " here";
    f.key = std::string(row.name);
    s.findings.push_back(f);
    s.found.push_back(row.kind);
  }
  report.scenarios.push_back(s);
  const reports::CiInput in{report, {}, {}, {}};
  const auto sarif = nlohmann::json::parse(reports::sarif_json(in, "test"));
  const auto& rules = sarif["runs"][0]["tool"]["driver"]["rules"];
  for (const auto& row : core::kFindingKindTable) {
    INFO(row.name);
    bool found = false;
    for (const auto& rule : rules) found |= rule["fullDescription"]["text"] == std::string(row.meaning);
    REQUIRE(found);
  }
}

TEST_CASE("a kind the value checks of a capture find is one they report, in every schedule alike",
          "[run][findings]") {
  // Would fail if a kind found only by the value checks lost the column that makes a capture's
  // outputs print it once: check_captured_values's findings are tested against the column in
  // tests/core/captured_values_test.cpp.
  for (const auto& row : core::kFindingKindTable) {
    INFO(row.name);
    if (row.found_by == core::FoundBy::values) REQUIRE(row.from_captured_values);
    REQUIRE(core::is_captured_value_kind(row.kind) == row.from_captured_values);
  }
}

namespace {
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("an unknown kind in expect: is answered with every kind of the table", "[run][findings]") {
  // The message was once written by hand and offered 9 of the 12 kinds.
  std::string text = read_text(std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/reuse-race.yaml");
  const std::string expect = "expect: {findings: [stream_race]}";
  REQUIRE(text.find(expect) != std::string::npos);
  text.replace(text.find(expect), expect.size(), "expect: {findings: [stream_racing]}");
  const auto s = core::parse_trace_scenario(text, "t.yaml");
  REQUIRE_FALSE(s);
  const std::string message = s.error().message();
  INFO(message);
  REQUIRE(message.find("unknown finding kind 'stream_racing' (expected stream_race, ") != std::string::npos);
  for (const auto& row : core::kFindingKindTable)
    REQUIRE(message.find(std::string(row.name)) != std::string::npos);
  REQUIRE(message.find(" or " + std::string(core::kFindingKindTable[core::kFindingKinds - 1].name) + ")") !=
          std::string::npos);
}

TEST_CASE("the scenario fuzzer's dictionary holds every finding kind's name", "[run][findings]") {
  // Would fail if a kind were added to the table and not to tests/fuzz/scenario.dict, whose
  // words libFuzzer splices into `expect:` lists.
  const std::string dict = read_text(std::string(SHARDCHECK_SOURCE_DIR) + "/tests/fuzz/scenario.dict");
  REQUIRE(!dict.empty());
  for (const auto& row : core::kFindingKindTable) {
    INFO(row.name);
    REQUIRE(dict.find("\n\"" + std::string(row.name) + "\"\n") != std::string::npos);
  }
}
