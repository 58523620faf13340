// The run layer holds every command-line override of a file's value to the file's own bounds
// (docs/limits.md), so no command can run what the file could not have asked for: the
// schedule overrides in options_for, `compare --steps` in compare_steps_problem. A run that
// reaches the simulator's own bound is bad input with no verdict, not an internal error.
#include <unistd.h>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "core/scenario/expectation.hpp"
#include "core/scenario/trace_scenario.hpp"
#include "run/compare.hpp"
#include "run/report.hpp"
#include "run/scenario.hpp"

using namespace shardcheck;

namespace {
run::LoadedScenario load(const std::string& path) {
  auto s = run::load_scenario(path);
  REQUIRE(s);
  return std::move(*s);
}
std::string shipped(const std::string& rel) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/" + rel;
}

// zero1-exact with a wider model: 3 steps load, 10000 steps pass the 2^24 reference bound.
std::string write_wide_training() {
  std::ifstream in(shipped("training/zero1-exact.yaml"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "hidden: 16";
  text.replace(text.find(from), from.size(), "hidden: 64");
  char path[] = "/tmp/shardcheck-wide-XXXXXX.yaml";
  const int fd = mkstemps(path, 5);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}
}  // namespace

TEST_CASE("options_for holds --runs and --seed to the file's schedule bounds", "[run][limits]") {
  using L = core::ScheduleLimits;
  const run::LoadedScenario s = load(shipped("trace/reuse-race.yaml"));
  REQUIRE(run::options_for(s, {}));

  run::ScheduleOverrides too_many;
  too_many.runs = L::kMaxRuns + 1;
  auto r = run::options_for(s, too_many);
  REQUIRE_FALSE(r);
  REQUIRE_THAT(r.error().message(), Catch::Contains("--runs 100001 is out of range 1..100000"));

  run::ScheduleOverrides none;
  none.runs = 0;
  REQUIRE_FALSE(run::options_for(s, none));

  // The file's runs from a seed at the top would use seeds past 2^63-1.
  run::ScheduleOverrides top;
  top.seed = static_cast<uint64_t>(L::kMaxSeed);
  r = run::options_for(s, top);
  REQUIRE_FALSE(r);
  REQUIRE_THAT(r.error().message(), Catch::Contains("--seed 9223372036854775807 with the file's"));
  top.runs = 1;  // one schedule at the top seed is fine (replay)
  REQUIRE(run::options_for(s, top));

  run::ScheduleOverrides past;
  past.seed = static_cast<uint64_t>(L::kMaxSeed) + 1;
  past.runs = 1;
  REQUIRE_FALSE(run::options_for(s, past));

  run::ScheduleOverrides policy;
  policy.policy = "fifo";
  REQUIRE_FALSE(run::options_for(s, policy));
}

TEST_CASE("compare --steps is held to the reference bound before anything runs", "[run][limits]") {
  const std::string path = write_wide_training();
  const run::LoadedScenario s = load(path);
  std::remove(path.c_str());
  REQUIRE(run::compare_steps_problem(s, "single_rank", 0).ok());
  REQUIRE(run::compare_steps_problem(s, "single_rank", 3).ok());
  const std::string why = run::compare_steps_problem(s, "single_rank", 10000).message();
  REQUIRE_THAT(why, Catch::Contains("--steps 10000"));
  REQUIRE_THAT(why, Catch::Contains("2^24"));
  REQUIRE_THAT(run::compare_steps_problem(s, "single_rank", 10001).message(),
               Catch::Contains("between 1 and 10000"));
  // compare_on_sim itself refuses it, without training a step.
  const run::CompareResult r = run::compare_on_sim(s, "single_rank", 10000);
  REQUIRE_THAT(r.bad_input, Catch::Contains("2^24"));
  REQUIRE(r.ours.empty());
  REQUIRE(r.error.empty());
}

TEST_CASE("a run that reaches the simulated memory bound is bad input with no verdict", "[run][limits]") {
  run::LoadedScenario s = load(shipped("trace/reuse-race.yaml"));
  s.options.max_device_bytes = 4096;  // less than its program allocates
  const run::CheckedRun c =
      run::run_checked(s, {}, /*determinism*/ true, run::ResultOptions{.traces = false});
  REQUIRE(c.error.empty());  // not shardcheck's fault
  REQUIRE_THAT(c.bad_input, Catch::Contains("bad input: this file needs more than"));
  REQUIRE_THAT(c.bad_input, Catch::Contains("simulated device memory exhausted"));
  REQUIRE_FALSE(c.outcome.judged.met);  // never "ok" beside it
  REQUIRE(c.outcome.explored.limit);
  REQUIRE(c.outcome.explored.findings.empty());  // nothing claimed for the cut run
  REQUIRE_FALSE(c.outcome.determinism);
  REQUIRE(c.result);
  REQUIRE_FALSE(c.result->met);
  REQUIRE_FALSE(c.result->complete);
}

TEST_CASE("options_for holds --runs to the bytes a file's schedules may touch together", "[run][limits]") {
  run::LoadedScenario s = load(shipped("trace/reuse-race.yaml"));
  run::ScheduleOverrides most;
  most.runs = 100000;
  REQUIRE(run::options_for(s, most));                    // a shipped file's schedules touch kilobytes
  s.bytes_per_run = core::TraceLimits::kMaxBytesPerRun;  // as a program at the per-schedule bound
  run::ScheduleOverrides four, five;
  four.runs = 4;
  five.runs = 5;
  REQUIRE(run::options_for(s, four));
  auto r = run::options_for(s, five);
  REQUIRE_FALSE(r);
  REQUIRE_THAT(r.error().message(),
               Catch::Contains("--runs 5: 5 schedules of 68719476736 bytes each touch more "
                               "than 274877906944 bytes (256 GiB)"));
}
