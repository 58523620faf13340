// Judging findings against expectations, and reading `expect:` and `schedule:`.
#include "core/scenario/expectation.hpp"

#include <algorithm>

namespace shardcheck::core {

namespace {
bool contains(const std::vector<FindingKind>& v, FindingKind k) {
  return std::find(v.begin(), v.end(), k) != v.end();
}

// A finding's own kind, or the kind of one of the consequences it lists.
bool shows(const Finding& f, FindingKind k) {
  if (f.kind == k) return true;
  const auto* d = std::get_if<CollectiveDetail>(&f.detail);
  return d && std::any_of(d->later.begin(), d->later.end(), [&](const auto& l) { return l.kind == k; });
}
}  // namespace

ExpectationResult judge(const Expectation& e, const std::vector<Finding>& findings) {
  ExpectationResult r;
  for (const FindingKindInfo& row : kFindingKindTable) {
    const FindingKind k = row.kind;
    const bool found =
        std::any_of(findings.begin(), findings.end(), [&](const Finding& f) { return shows(f, k); });
    if (found) r.found.push_back(k);
    if (contains(e.findings, k) && !found) r.missing.push_back(k);
    if (found && !contains(e.findings, k) && !contains(e.allow, k)) r.unexpected.push_back(k);
  }
  r.met = r.missing.empty() && r.unexpected.empty();
  return r;
}

std::string kinds_to_string(const std::vector<FindingKind>& k) {
  if (k.empty()) return "clean";
  std::string s;
  for (size_t i = 0; i < k.size(); ++i) s += (i ? ", " : "") + std::string(to_string(k[i]));
  return s;
}

std::string describe(const Expectation& e) {
  if (!e.given) return "nothing stated (clean)";
  std::string s = kinds_to_string(e.findings);
  if (!e.allow.empty()) s += " (allow " + kinds_to_string(e.allow) + ")";
  return s;
}

Expectation read_expectation(const YamlReader& y, const YAML::Node& n) {
  Expectation e;
  e.loc = y.loc(n);
  y.map(n, "expect");
  y.keys(n, {"findings", "allow"}, "expect");
  y.require(n, "findings", "expect");
  auto read = [&](const YAML::Node& list, std::vector<FindingKind>& out, const char* what) {
    y.seq(list, what);
    for (const auto& item : list) {
      const std::string name = y.str(item, what);
      auto k = parse_finding_kind(name);
      if (!k) {
        y.fail(item, "unknown finding kind '" + name + "' (expected " + finding_kind_names() + ")");
      }
      out.push_back(*k);
    }
  };
  read(n["findings"], e.findings, "expect.findings");
  if (n["allow"]) read(n["allow"], e.allow, "expect.allow");
  return e;
}

ScheduleSpec read_schedule(const YamlReader& y, const YAML::Node& n) {
  ScheduleSpec s;
  y.map(n, "schedule");
  y.keys(n, {"policy", "seed", "runs", "depth"}, "schedule");
  if (n["policy"]) {
    s.policy = y.str(n["policy"], "schedule.policy");
    if (s.policy != "in_order" && s.policy != "random" && s.policy != "pct" && s.policy != "delay_comm") {
      y.fail(n["policy"],
             "unknown schedule policy '" + s.policy + "' (expected in_order, random, pct or delay_comm)");
    }
  }
  using L = ScheduleLimits;
  if (n["seed"]) s.seed = static_cast<uint64_t>(y.integer(n["seed"], "schedule.seed", 0, L::kMaxSeed));
  if (n["runs"]) s.runs = static_cast<int>(y.integer(n["runs"], "schedule.runs", 1, L::kMaxRuns));
  if (n["depth"]) s.depth = static_cast<int>(y.integer(n["depth"], "schedule.depth", 1, L::kMaxDepth));
  if (auto why = schedule_seeds_exceeded(s.seed, s.runs); !why)
    y.fail(n["seed"], "schedule: " + why.message());
  return s;
}

Status schedule_seeds_exceeded(uint64_t seed, int64_t runs) {
  const auto max = static_cast<uint64_t>(ScheduleLimits::kMaxSeed);
  const std::string largest = "the largest seed, 2^63-1 (" + std::to_string(max) + ")";
  if (seed > max) return fail("seed " + std::to_string(seed) + " is past " + largest);
  if (runs < 1 || static_cast<uint64_t>(runs - 1) <= max - seed) return {};
  return fail(std::to_string(runs) + " runs from seed " + std::to_string(seed) + " would use seeds up to " +
              std::to_string(seed + static_cast<uint64_t>(runs - 1)) + ", past " + largest +
              ", which replay could not repeat");
}

}  // namespace shardcheck::core
