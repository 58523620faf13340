// What a scenario expects (`expect: {findings: [...], allow: [...]}`) and how a run's
// findings are judged against it: every listed kind found at least once, and nothing else
// found unless allowed (consequences such as a divergence that follows from a miscount).
//   ExpectationResult r = judge(scenario.expect, findings);
//   if (!r.met) print(r.missing, r.unexpected);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/check/findings.hpp"
#include "core/scenario/yaml_reader.hpp"

namespace shardcheck::core {

// Without `expect:` a file states nothing (`given` false): it is judged as one expecting to be
// clean, and commands report what they find instead of a verdict on an expectation.
struct Expectation {
  std::vector<FindingKind> findings;
  std::vector<FindingKind> allow;
  SourceLoc loc;
  bool given = true;
};

struct ScheduleSpec {
  std::string policy = "random";  // in_order | random | pct | delay_comm
  uint64_t seed = 1;
  int runs = 1;
  int depth = 3;
};

// Bounds of `schedule:` and of the command line's --seed and --runs (docs/limits.md). Run
// i of an exploration uses seed + i, and each of those seeds must be one `replay --seed`
// takes, so seed + runs - 1 stays at or below kMaxSeed.
struct ScheduleLimits {
  static constexpr int kMaxRuns = 100000;
  static constexpr int kMaxDepth = 64;  // PCT's change points
  static constexpr int64_t kMaxSeed = INT64_MAX;
};
// "" when `runs` runs from `seed` use only seeds up to ScheduleLimits::kMaxSeed; else why
// not, as a clause: "20 runs from seed S would use seeds up to T, past the largest, 2^63-1".
Status schedule_seeds_exceeded(uint64_t seed, int64_t runs);

struct ExpectationResult {
  bool met = true;
  std::vector<FindingKind> missing;     // expected, not found
  std::vector<FindingKind> unexpected;  // found, neither expected nor allowed
  std::vector<FindingKind> found;       // distinct kinds found, in kind order
};

ExpectationResult judge(const Expectation& e, const std::vector<Finding>& findings);
std::string describe(const Expectation& e);  // "stream_race" / "clean" / "a, b (allow c)"
std::string kinds_to_string(const std::vector<FindingKind>& k);

// Shared parts of scenario files.
Expectation read_expectation(const YamlReader& y, const YAML::Node& n);
ScheduleSpec read_schedule(const YamlReader& y, const YAML::Node& n);

}  // namespace shardcheck::core
