// `shardcheck list`, and `--report` on run and compare: the folder holds every format.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/run_command.hpp"

using shardcheck::testing::run_shardcheck;

TEST_CASE("list shows every mutation with its upstream reference and the scenarios", "[cli][list]") {
  auto r = run_shardcheck("list --scenarios " + std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios");
  REQUIRE(r.exit_code == 0);
  for (const char* m :
       {"main_grad_alloc_default_stream", "post_step_sync_set_order", "stale_model_weight_after_step",
        "tied_grad_norm_double_count", "pp_embedding_allreduce_raw_shards", "vpp_separate_contexts",
        "zero1_missing_no_sync", "grad_divisor_on_running_sum", "no_initial_broadcast"}) {
    REQUIRE_THAT(r.out, Catch::Contains(m));
  }
  REQUIRE_THAT(r.out, Catch::Contains("#6187"));
  REQUIRE_THAT(r.out, Catch::Contains("reuse-race.yaml"));
  REQUIRE_THAT(r.out, Catch::Contains("expects stream_race"));
  REQUIRE(r.out.find("does not load") == std::string::npos);
}

TEST_CASE("run --report writes Markdown, HTML, JSON and a trace per finding", "[cli][report]") {
  const std::string dir = "/tmp/shardcheck-report-test";
  std::filesystem::remove_all(dir);
  const std::string s = std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/";
  auto r = run_shardcheck("run " + s + "reuse-race.yaml " + s + "cross-group-deadlock.yaml " + s +
                          "p2p-safe.yaml --report " + dir);
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("report: " + dir + "/report.html"));
  for (const char* f : {"report.md", "report.html", "report.json", "trace-reuse-race-0.json",
                        "trace-cross-group-deadlock-0.json"}) {
    INFO(f);
    REQUIRE(std::filesystem::exists(dir + "/" + f));
  }
  std::ifstream in(dir + "/report.json");
  auto j = nlohmann::json::parse(in);
  REQUIRE(j["schema_version"] == 1);
  REQUIRE(j["scenarios"].size() == 3);
  REQUIRE(j["totals"]["met"] == 3);
  REQUIRE(j["scenarios"][0]["findings"][0]["kind"] == "stream_race");
  std::filesystem::remove_all(dir);
}

TEST_CASE("compare --report draws the loss curves", "[cli][report]") {
  const std::string dir = "/tmp/shardcheck-compare-report-test";
  auto r = run_shardcheck("compare " + std::string(SHARDCHECK_SOURCE_DIR) +
                          "/scenarios/training/zero1-exact.yaml --report " + dir);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(dir + "/report.html");
  std::stringstream html;
  html << in.rdbuf();
  REQUIRE_THAT(html.str(), Catch::Contains("loss-plot"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the version flag names the version and the commit it was built from", "[cli][version]") {
  const auto r = run_shardcheck("--version");
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Catch::StartsWith("shardcheck 0.1.0 (commit "));
  REQUIRE_THAT(r.out, !Catch::Contains("commit unknown"));  // built from a git checkout
}
