// Finding kind names and de-duplication.
#include "core/check/findings.hpp"

namespace shardcheck::core {

// In FindingKind's order: info(k) indexes it.
const FindingKindInfo kFindingKindTable[kFindingKinds] = {
    {FindingKind::stream_race, "stream_race", "race", FoundBy::detector, true, true, false,
     "Two accesses to the same device bytes, at least one a write, with no happens-before between them (also "
     "across a memory block's lifetimes, when the caching allocator hands a freed block on)."},
    {FindingKind::collective_mismatch, "collective_mismatch", "collective", FoundBy::detector, false, false,
     false,
     "The k-th collective of a process group differs across ranks (op, dtype, count, reduce op, root): a "
     "hang "
     "or corrupted memory on real hardware."},
    {FindingKind::collective_swap, "collective_swap", "collective", FoundBy::detector, false, false, false,
     "The ranks' collectives match in shape but not in meaning: the ranks silently exchange the wrong "
     "tensors."},
    {FindingKind::deadlock, "deadlock", "deadlock", FoundBy::detector, false, true, false,
     "Nothing can run but work remains: a cycle of waits through ranks and streams."},
    {FindingKind::grad_norm_miscount, "grad_norm_miscount", "training judge", FoundBy::training, false, false,
     true,
     "The gradient norm counts some logical elements other than once (e.g. a tied embedding on two pipeline "
     "stages)."},
    {FindingKind::layout_mismatch, "layout_mismatch", "layout", FoundBy::detector, false, false, false,
     "A reduction across ranks combines elements of different logical positions."},
    {FindingKind::uninitialized_read, "uninitialized_read", "uninit", FoundBy::detector, true, true, false,
     "Never-written bytes (a fresh block, layout gaps or padding) are read into a result."},
    {FindingKind::numerics_divergence, "numerics_divergence", "training judge", FoundBy::reference, true,
     false, true, "Weights differ from the single-rank reference (bitwise in exact mode)."},
    {FindingKind::replica_divergence, "replica_divergence", "training judge", FoundBy::training, true, false,
     true, "Replicated buffers differ across the ranks that should hold copies."},
};

const FindingKindInfo& info(FindingKind k) { return kFindingKindTable[static_cast<int>(k)]; }

std::string_view to_string(FindingKind k) { return info(k).name; }

std::optional<FindingKind> parse_finding_kind(std::string_view s) {
  for (const auto& row : kFindingKindTable) {
    if (row.name == s) return row.kind;
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
