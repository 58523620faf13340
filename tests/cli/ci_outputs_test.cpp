// --junit and --sarif on `run` and `explore`: a JUnit test case per scenario file with the
// findings in a failure when the expectation is not met; a SARIF 2.1.0 result per finding at
// the scenario line (or the captured program's Python line) it concerns; both written when
// the command fails, and escaped so any name a file holds stays well-formed.
#include <stdlib.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check/findings.hpp"
#include "tests/support/run_command.hpp"

using shardcheck::testing::CommandResult;
using shardcheck::testing::run_command;
using shardcheck::testing::run_shardcheck;

namespace {

std::string source(const std::string& path) { return std::string(SHARDCHECK_SOURCE_DIR) + "/" + path; }

std::string temp_dir() {
  char path[] = "/tmp/shardcheck-ci-XXXXXX";
  REQUIRE(mkdtemp(path) != nullptr);
  return path;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Well-formed XML, by Python's parser where python3 is installed (make test installs it).
void require_well_formed_xml(const std::string& path) {
  if (run_command("command -v python3").exit_code != 0) return;
  const CommandResult r =
      run_command("python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' " + path);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
}

// The fields SARIF 2.1.0 requires of what we write (§3.13 sarifLog, §3.14 run, §3.19
// toolComponent, §3.27 result, §3.28 location), and that every result names one of the
// driver's rules by id and index.
void require_valid_sarif(const nlohmann::json& s) {
  REQUIRE(s.at("version") == "2.1.0");
  REQUIRE(s.at("$schema").get<std::string>().find("sarif-2.1.0") != std::string::npos);
  REQUIRE(s.at("runs").size() == 1);
  const auto& run = s.at("runs")[0];
  const auto& driver = run.at("tool").at("driver");
  REQUIRE(driver.at("name") == "shardcheck");
  const auto& rules = driver.at("rules");
  REQUIRE(rules.size() == static_cast<size_t>(shardcheck::core::kFindingKinds));  // a rule per kind
  for (const auto& result : run.at("results")) {
    INFO(result.dump());
    const std::string id = result.at("ruleId");
    const size_t index = result.at("ruleIndex");
    REQUIRE(index < rules.size());
    REQUIRE(rules[index].at("id") == id);
    REQUIRE(!result.at("message").at("text").get<std::string>().empty());
    REQUIRE(result.at("locations").size() >= 1);
    for (const auto& loc : result.at("locations")) {
      REQUIRE(!loc.at("physicalLocation").at("artifactLocation").at("uri").get<std::string>().empty());
      REQUIRE(loc.at("physicalLocation").at("region").at("startLine").get<int>() >= 1);
    }
  }
  REQUIRE(run.at("invocations").size() == 1);
  REQUIRE(run.at("invocations")[0].contains("executionSuccessful"));
}

// The first result of `rule` in the SARIF log, as (uri, line).
std::pair<std::string, int> where(const nlohmann::json& s, const std::string& rule) {
  for (const auto& r : s["runs"][0]["results"]) {
    if (r["ruleId"] != rule) continue;
    const auto& p = r["locations"][0]["physicalLocation"];
    return {p["artifactLocation"]["uri"], p["region"]["startLine"]};
  }
  return {"", 0};
}

}  // namespace

TEST_CASE(
    "run --junit --sarif: a test case per file, a failure for an unmet expectation, results at their lines",
    "[cli][ci]") {
  const std::string dir = temp_dir();
  // The race with an expectation of clean: a failure whose body holds the finding.
  std::string text = read(source("scenarios/trace/reuse-race.yaml"));
  text.replace(text.find("expect: {findings: [stream_race]}"), std::string::npos, "expect: {findings: []}\n");
  text.replace(text.find("name: reuse-race"), 16, "name: unexpected-race");
  std::ofstream(dir + "/unexpected-race.yaml") << text;
  const CommandResult r = run_shardcheck("run " + source("scenarios/trace/reuse-race.yaml") + " " + dir +
                                         "/unexpected-race.yaml " + source("scenarios/trace/p2p-safe.yaml") +
                                         " --junit " + dir + "/j.xml --sarif " + dir + "/s.sarif");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);
  const std::string junit = read(dir + "/j.xml");
  INFO(junit);
  require_well_formed_xml(dir + "/j.xml");
  REQUIRE_THAT(junit, Catch::StartsWith("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites"));
  REQUIRE_THAT(junit, Catch::Contains("tests=\"3\" failures=\"1\" errors=\"0\""));
  REQUIRE(count(junit, "<testcase ") == 3);
  REQUIRE(count(junit, "<failure ") == 1);
  REQUIRE_THAT(junit, Catch::Contains("<failure message=\"expected clean, found stream_race\""));
  REQUIRE_THAT(junit, Catch::Contains("replay " + dir + "/unexpected-race.yaml --seed 1"));

  const nlohmann::json sarif = nlohmann::json::parse(read(dir + "/s.sarif"));
  require_valid_sarif(sarif);
  REQUIRE(sarif["runs"][0]["results"].size() == 2);  // one race per race file
  // At the kernel that writes the reused block (line 22), with the reduce-scatter it races
  // with (line 18) as a related location; the expected one is marked as meant.
  const auto& expected = sarif["runs"][0]["results"][0];
  REQUIRE(expected["locations"][0]["physicalLocation"]["region"]["startLine"] == 22);
  REQUIRE(expected["relatedLocations"][0]["physicalLocation"]["region"]["startLine"] == 18);
  REQUIRE(expected.contains("suppressions"));
  REQUIRE(!sarif["runs"][0]["results"][1].contains("suppressions"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a captured program's finding is located at its Python line", "[cli][ci][capture]") {
  const std::string dir = temp_dir();
  const CommandResult r = run_shardcheck("run " + source("tests/capture/fixtures/megatron-6137") + " " +
                                         source("tests/capture/h200/grad-reuse-race") + " --sarif " + dir +
                                         "/s.sarif --junit " + dir + "/j.xml");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);
  const nlohmann::json sarif = nlohmann::json::parse(read(dir + "/s.sarif"));
  require_valid_sarif(sarif);
  const auto& results = sarif["runs"][0]["results"];
  REQUIRE(results.size() == 2);
  // megatron-6137: aten::normal_ at train.py:42 writes the block the reduce-scatter at :37 reads.
  const auto& first = results[0]["locations"][0]["physicalLocation"];
  REQUIRE(first["artifactLocation"]["uri"] == "train.py");
  REQUIRE(first["region"]["startLine"] == 42);
  REQUIRE(results[0]["relatedLocations"][0]["physicalLocation"]["region"]["startLine"] == 37);
  // grad_reuse_race.py (README): the copy at line 38 into the block the mul at line 32 reads.
  const auto& second = results[1]["locations"][0]["physicalLocation"];
  REQUIRE(second["artifactLocation"]["uri"] == "examples/pytorch/grad_reuse_race.py");
  REQUIRE(second["region"]["startLine"] == 38);
  const std::string junit = read(dir + "/j.xml");
  REQUIRE_THAT(junit, Catch::Contains("<failure message=\"found stream_race\" type=\"findings\""));
  std::filesystem::remove_all(dir);
}

TEST_CASE("explore --sarif places a collective mismatch and a training bug at their lines", "[cli][ci]") {
  const std::string dir = temp_dir();
  CommandResult r = run_shardcheck("explore " + source("scenarios/trace/collective-order-cascade.yaml") +
                                   " --sarif " + dir + "/c.sarif");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  nlohmann::json sarif = nlohmann::json::parse(read(dir + "/c.sarif"));
  require_valid_sarif(sarif);
  // Rank 0's first all-gather (w0, line 26); rank 1 issues w1 there (line 28).
  REQUIRE(where(sarif, "collective_mismatch").second == 26);
  // The kernel that reads the never-written bytes.
  r = run_shardcheck("explore " + source("scenarios/trace/uninitialized-read.yaml") + " --sarif " + dir +
                     "/u.sarif");
  REQUIRE(r.exit_code == 0);
  sarif = nlohmann::json::parse(read(dir + "/u.sarif"));
  require_valid_sarif(sarif);
  REQUIRE(where(sarif, "uninitialized_read").second == 11);
  r = run_shardcheck("explore " + source("scenarios/catalog/zero1-missing-no-sync.yaml") + " --sarif " + dir +
                     "/t.sarif");
  REQUIRE(r.exit_code == 0);
  sarif = nlohmann::json::parse(read(dir + "/t.sarif"));
  require_valid_sarif(sarif);
  // The `mutations:` entry that switches the bug on.
  const auto [uri, line] = where(sarif, "numerics_divergence");
  REQUIRE(read(source("scenarios/catalog/zero1-missing-no-sync.yaml"))
              .find("mutations: [zero1_missing_no_sync]") != std::string::npos);
  std::istringstream lines(read(source("scenarios/catalog/zero1-missing-no-sync.yaml")));
  std::string l;
  for (int i = 0; i < line; ++i) std::getline(lines, l);
  REQUIRE_THAT(l, Catch::StartsWith("mutations: [zero1_missing_no_sync]"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("names with markup and control characters stay well-formed in JUnit and SARIF", "[cli][ci]") {
  const std::string dir = temp_dir();
  std::string text = read(source("scenarios/trace/reuse-race.yaml"));
  text.replace(text.find("name: reuse-race"), 16, "name: \"a<b & 'c\\\"d>\"");
  text.replace(text.find("next_forward"), 12, "\"next</x>&\\u00e9\"");
  text.replace(text.find("expect: {findings: [stream_race]}"), std::string::npos, "expect: {findings: []}\n");
  std::ofstream(dir + "/odd.yaml") << text;
  const CommandResult r =
      run_shardcheck("run " + dir + "/odd.yaml --junit " + dir + "/j.xml --sarif " + dir + "/s.sarif");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 1);
  const std::string junit = read(dir + "/j.xml");
  INFO(junit);
  require_well_formed_xml(dir + "/j.xml");
  REQUIRE_THAT(junit, Catch::Contains("name=\"a&lt;b &amp; 'c&quot;d&gt;\""));
  REQUIRE_THAT(junit, Catch::Contains("next&lt;/x&gt;&amp;é"));
  REQUIRE(junit.find("</x>") == std::string::npos);
  const nlohmann::json sarif = nlohmann::json::parse(read(dir + "/s.sarif"));
  require_valid_sarif(sarif);
  REQUIRE(sarif["runs"][0]["results"][0]["properties"]["scenario"] == "a<b & 'c\"d>");
  std::filesystem::remove_all(dir);
}

TEST_CASE("bad input and an internal error still write both files, saying what happened", "[cli][ci]") {
  const std::string dir = temp_dir();
  std::ofstream(dir + "/bad.yaml") << "kind: trace\nname: bad\nranks: 1\nbogus: 1\n";
  CommandResult r = run_shardcheck("run " + source("scenarios/trace/p2p-safe.yaml") + " " + dir +
                                   "/bad.yaml --junit " + dir + "/j.xml --sarif " + dir + "/s.sarif");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 2);
  std::string junit = read(dir + "/j.xml");
  require_well_formed_xml(dir + "/j.xml");
  REQUIRE_THAT(junit, Catch::Contains("errors=\"1\" skipped=\"1\""));
  REQUIRE_THAT(junit, Catch::Contains("<error message=\"bad input: " + dir + "/bad.yaml:"));
  nlohmann::json sarif = nlohmann::json::parse(read(dir + "/s.sarif"));
  require_valid_sarif(sarif);
  REQUIRE(sarif["runs"][0]["invocations"][0]["executionSuccessful"] == false);

  r = run_command("SHARDCHECK_TEST_FAULT=internal_error " + std::string(SHARDCHECK_BINARY) + " run " +
                  source("scenarios/trace/reuse-race.yaml") + " " + source("scenarios/trace/p2p-safe.yaml") +
                  " --junit " + dir + "/j.xml --sarif " + dir + "/s.sarif");
  REQUIRE(r.exit_code == 3);
  junit = read(dir + "/j.xml");
  INFO(junit);
  require_well_formed_xml(dir + "/j.xml");
  REQUIRE_THAT(junit, Catch::Contains("<error message=\"internal error: a test fault"));
  REQUIRE_THAT(junit, Catch::Contains("<skipped message=\"not run: stopped by an internal error\""));
  REQUIRE_THAT(junit, Catch::Contains("<property name=\"complete\" value=\"false\"/>"));
  sarif = nlohmann::json::parse(read(dir + "/s.sarif"));
  require_valid_sarif(sarif);
  REQUIRE(sarif["runs"][0]["invocations"][0]["executionSuccessful"] == false);
  std::filesystem::remove_all(dir);
}
