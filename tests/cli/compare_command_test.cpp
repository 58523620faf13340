// `shardcheck compare`: side-by-side losses, bitwise weight agreement in exact mode, and the
// first divergent tensor when a catalog bug is on.
#include <unistd.h>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "tests/support/run_command.hpp"

using shardcheck::testing::run_shardcheck;

namespace {
std::string file(const std::string& rel) { return std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/" + rel; }
}  // namespace

TEST_CASE("compare against the single-rank reference is bitwise in exact mode", "[cli][compare]") {
  auto r = run_shardcheck("compare " + file("training/zero1-exact.yaml") + " --against single_rank");
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("max |delta loss| = 0 (relative 0)"));
  REQUIRE_THAT(r.out, Catch::Contains("weights: bitwise equal after every step"));
  REQUIRE_THAT(r.out, Catch::Contains("achievable loss"));
}

TEST_CASE("compare against DistOpt names the first divergent tensor of a buggy run", "[cli][compare]") {
  auto fixed = run_shardcheck("compare " + file("catalog/stale-model-weight-after-step-fixed.yaml") +
                              " --against distopt");
  REQUIRE(fixed.exit_code == 0);
  REQUIRE_THAT(fixed.out, Catch::Contains("bitwise equal"));
  auto buggy = run_shardcheck("compare " + file("catalog/stale-model-weight-after-step.yaml") +
                              " --against distopt --steps 2");
  REQUIRE(buggy.exit_code == 1);
  REQUIRE_THAT(buggy.out, Catch::Contains("first difference after step 1"));
  REQUIRE_THAT(buggy.out, Catch::Contains(": 2 steps"));
}

TEST_CASE("compare rejects trace scenarios and unknown baselines", "[cli][compare]") {
  REQUIRE(run_shardcheck("compare " + file("trace/reuse-race.yaml")).exit_code == 2);
  REQUIRE(run_shardcheck("compare " + file("training/zero1-exact.yaml") + " --against megatron").exit_code ==
          2);
}

TEST_CASE("compare --steps past the reference bound exits 2 before anything runs", "[cli][compare]") {
  // zero1-exact with hidden 64 loads with its 3 steps; 10000 steps would keep more than 2^24 weights.
  std::ifstream in(file("training/zero1-exact.yaml"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("hidden: 16"), 10, "hidden: 64");
  const std::string path = "/tmp/shardcheck-compare-wide-" + std::to_string(getpid()) + ".yaml";
  std::ofstream(path) << text;
  auto r = run_shardcheck("compare " + path + " --steps 10000");
  std::remove(path.c_str());
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains("--steps 10000"));
  REQUIRE_THAT(r.err, Catch::Contains("2^24"));
  REQUIRE(r.out.empty());
}

TEST_CASE("compare --capture sets a capture's collectives beside the engine's, rank by rank",
          "[cli][compare]") {
  const std::string cap = std::string(SHARDCHECK_SOURCE_DIR) + "/tests/capture/h100/mfsdp-optim-4";
  auto r = run_shardcheck("compare " + file("fidelity/mfsdp-optim.yaml") + " --capture " + cap);
  // Four Linear(256, 256) blocks against TinyLM's units: nothing aligns, and the summary says
  // what each side issues, the capture's by its Python lines.
  REQUIRE(r.exit_code == 1);
  REQUIRE_THAT(r.out, Catch::Contains("rank 3: 24 captured, 45 modeled"));
  REQUIRE_THAT(r.out, Catch::Contains("first difference, rank 0"));
  REQUIRE_THAT(r.out, Catch::Contains("modeled only: broadcast 'block.N:init'"));
  REQUIRE_THAT(r.out, Catch::Contains("captured only: reduce_scatter at "));
  REQUIRE_THAT(r.out, Catch::Contains("megatron_fsdp/experimental/dbuffer.py:443"));
}

TEST_CASE("compare --capture refuses what is not a capture, and GPU or report options", "[cli][compare]") {
  const std::string cap = std::string(SHARDCHECK_SOURCE_DIR) + "/tests/capture/h100/mfsdp-optim-4";
  auto not_capture = run_shardcheck("compare " + file("fidelity/mfsdp-optim.yaml") + " --capture " +
                                    file("trace/reuse-race.yaml"));
  REQUIRE(not_capture.exit_code == 2);
  REQUIRE_THAT(not_capture.err, Catch::Contains("--capture takes a captured program's folder"));
  auto missing =
      run_shardcheck("compare " + file("fidelity/mfsdp-optim.yaml") + " --capture /nonexistent/cap");
  REQUIRE(missing.exit_code == 2);
  auto steps =
      run_shardcheck("compare " + file("fidelity/mfsdp-optim.yaml") + " --capture " + cap + " --steps 1");
  REQUIRE(steps.exit_code == 2);
  REQUIRE_THAT(steps.err, Catch::Contains("takes no --backend gpu, --report or --steps"));
}
