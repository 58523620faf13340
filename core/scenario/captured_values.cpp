// The value checks of a captured program (captured_values.hpp): the walk that observes what each
// digested tensor carried, and the helpers the checks share (captured_values_internal.hpp).
#include "core/scenario/captured_values.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/scenario/captured_values_internal.hpp"

namespace shardcheck::core {
namespace values {

std::string source_of(const CapturedProgram& p, int32_t source) {
  return source >= 0 ? p.sources[static_cast<size_t>(source)] : std::string("an unknown line");
}

SourceLine line_of(const CapturedProgram& p, int32_t source) {
  return source >= 0 ? p.source_lines[static_cast<size_t>(source)] : SourceLine{};
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string number(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

const CapturedGroup& group_of(const CapturedProgram& p, int rank, const CapturedRecord& rec) {
  const CapturedRank& r = p.ranks[static_cast<size_t>(rank)];
  const int32_t local = rec.kind == CapturedKind::coll ? rec.a : rec.b;
  return p.groups[static_cast<size_t>(r.groups[static_cast<size_t>(local)])];
}

std::vector<std::vector<int>> classes(const ByRank& m) {
  std::map<uint64_t, std::vector<int>> by_hash;
  for (const auto& [rank, v] : m) by_hash[v->hash].push_back(rank);
  std::vector<std::vector<int>> out;
  for (auto& [h, ranks] : by_hash) out.push_back(std::move(ranks));
  std::sort(out.begin(), out.end());
  return out;
}

ByRank only(const ByRank& m, const std::vector<int>& ranks) {
  ByRank out;
  for (int r : ranks) {
    if (auto it = m.find(r); it != m.end()) out.emplace(r, it->second);
  }
  return out;
}

RankMask mask_of(const std::vector<int>& ranks) {
  RankMask m = 0;
  for (int r : ranks) m |= rank_bit(r);
  return m;
}

std::string names_text(const CapturedProgram& p, const std::vector<int32_t>& tensors, size_t shown) {
  std::string out;
  for (size_t i = 0; i < tensors.size() && i < shown; ++i)
    out += (i ? ", '" : "'") + p.strings[static_cast<size_t>(tensors[i])] + "'";
  if (tensors.size() > shown) out += " and " + std::to_string(tensors.size() - shown) + " more";
  return out;
}

// Walks the program once (value_flow.hpp) and keeps the facts of the bytes each gradient and
// parameter digest names where it was taken, and of each collective's input as it was issued.
Observed observe(const CapturedProgram& p) {
  Observed seen;
  std::vector<std::multimap<int32_t, const CapturedValue*>> at(p.ranks.size());
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    for (const CapturedValue& v : p.ranks[r].values) {
      if ((v.of == Of::grad || (v.of == Of::param && !v.after)) && v.range.buf >= 0)
        at[r].emplace(v.position, &v);
    }
  }
  ValueFlow flow(p);
  flow.walk([&](int r, size_t i, const RankFlow& f) {
    auto [lo, hi] = at[static_cast<size_t>(r)].equal_range(static_cast<int32_t>(i));
    for (auto it = lo; it != hi; ++it) {
      const CapturedValue& v = *it->second;
      (v.of == Of::grad ? seen.grads : seen.params)[{r, v.tensor, v.step}] = f.read(v.range);
    }
    const CapturedRank& rank = p.ranks[static_cast<size_t>(r)];
    if (i < rank.records.size() && rank.records[i].kind == CapturedKind::coll &&
        rank.records[i].coll != CollectiveKind::barrier) {
      seen.inputs[{r, static_cast<int32_t>(i)}] = f.read(rank.ranges[rank.records[i].first]);
      seen.steps[{r, static_cast<int32_t>(i)}] = f.steps_before(i);
    }
  });
  return seen;
}

}  // namespace values

std::vector<Finding> check_captured_values(const CapturedProgram& program) {
  std::vector<Finding> out;
  const bool any = std::any_of(program.ranks.begin(), program.ranks.end(),
                               [](const CapturedRank& r) { return !r.values.empty(); });
  if (!any) return out;
  const values::Observed seen = values::observe(program);
  values::replica_findings(program, seen, out);
  values::double_findings(program, seen, out);
  values::norm_findings(program, out);
  values::divisor_findings(program, seen, out);
  return out;
}

}  // namespace shardcheck::core
