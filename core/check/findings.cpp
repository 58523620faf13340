// Finding kind names and de-duplication.
#include "core/check/findings.hpp"

namespace shardcheck::core {

namespace {
constexpr std::string_view kNames[kFindingKinds] = {
    "stream_race",        "collective_mismatch", "collective_swap",
    "deadlock",           "grad_norm_miscount",  "layout_mismatch",
    "uninitialized_read", "numerics_divergence", "replica_divergence",
};
}

std::string_view to_string(FindingKind k) { return kNames[static_cast<int>(k)]; }

std::optional<FindingKind> parse_finding_kind(std::string_view s) {
  for (int i = 0; i < kFindingKinds; ++i) {
    if (kNames[i] == s) return static_cast<FindingKind>(i);
  }
  return std::nullopt;
}

void add_finding(std::vector<Finding>& list, Finding f) {
  for (Finding& g : list) {
    if (g.kind == f.kind && g.key == f.key) {
      g.occurrences += f.occurrences;
      return;
    }
  }
  list.push_back(std::move(f));
}

}  // namespace shardcheck::core
