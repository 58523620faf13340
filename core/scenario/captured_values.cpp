// The value checks of a captured program (captured_values.hpp): the walk that observes what each
// digested tensor carried, and the helpers the checks share (captured_values_internal.hpp).
#include "core/scenario/captured_values.hpp"

#include <algorithm>
#include <bit>
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

int Observed::losses_in(RankMask terms) const {
  int n = 0;
  for (RankMask left = terms; left != 0; ++n) {
    const int r = std::countr_zero(left);
    left &= ~(static_cast<size_t>(r) < together.size() ? together[static_cast<size_t>(r)] : rank_bit(r));
    left &= ~rank_bit(r);
  }
  return n;
}

namespace {

// Ranks compute one loss together (tensor parallelism: each holds a part of one model and the
// forward's collectives combine the parts) where their k-th losses are the same bytes and each
// carries the other's data. Ranks of data parallelism fed the same data have equal losses too,
// but each computed its own from its own data alone; experts routed by all_to_all carry each
// other's data, but their losses differ.
std::vector<RankMask> together(
    const std::vector<std::vector<std::pair<const CapturedValue*, RankMask>>>& losses) {
  const size_t ranks = losses.size();
  std::vector<int> parent(ranks);
  for (size_t r = 0; r < ranks; ++r) parent[r] = static_cast<int>(r);
  auto find = [&](int x) {
    while (parent[static_cast<size_t>(x)] != x) x = parent[static_cast<size_t>(x)];
    return x;
  };
  for (size_t a = 0; a < ranks; ++a) {
    for (size_t b = a + 1; b < ranks; ++b) {
      const auto &la = losses[a], &lb = losses[b];
      for (size_t k = 0; k < la.size() && k < lb.size(); ++k) {
        const bool same = la[k].first->hash == lb[k].first->hash && la[k].first->elements > 0;
        if (same && (la[k].second & rank_bit(static_cast<int>(b))) &&
            (lb[k].second & rank_bit(static_cast<int>(a)))) {
          parent[static_cast<size_t>(find(static_cast<int>(b)))] = find(static_cast<int>(a));
          break;
        }
      }
    }
  }
  std::vector<RankMask> root(ranks, 0), out(ranks, 0);
  for (size_t r = 0; r < ranks; ++r)
    root[static_cast<size_t>(find(static_cast<int>(r)))] |= rank_bit(static_cast<int>(r));
  for (size_t r = 0; r < ranks; ++r) out[r] = root[static_cast<size_t>(find(static_cast<int>(r)))];
  return out;
}

}  // namespace

// Walks the program once (value_flow.hpp) and keeps the facts of the bytes each gradient,
// parameter and loss digest names where it was taken, and of each collective's input as it was
// issued.
Observed observe(const CapturedProgram& p) {
  Observed seen;
  seen.losses.resize(p.ranks.size());
  std::vector<std::multimap<int32_t, const CapturedValue*>> at(p.ranks.size());
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    for (const CapturedValue& v : p.ranks[r].values) {
      const bool named = v.of == Of::grad || v.of == Of::loss || (v.of == Of::param && !v.after);
      if (named && v.range.buf >= 0) at[r].emplace(v.position, &v);
    }
  }
  ValueFlow flow(p);
  flow.walk([&](int r, size_t i, const RankFlow& f) {
    auto [lo, hi] = at[static_cast<size_t>(r)].equal_range(static_cast<int32_t>(i));
    for (auto it = lo; it != hi; ++it) {
      const CapturedValue& v = *it->second;
      if (v.of == Of::loss) {
        seen.losses[static_cast<size_t>(r)].emplace_back(&v, f.read(v.range).terms);
        continue;
      }
      (v.of == Of::grad ? seen.grads : seen.params)[{r, v.tensor, v.step}] = f.read(v.range);
    }
    const CapturedRank& rank = p.ranks[static_cast<size_t>(r)];
    if (i < rank.records.size() && rank.records[i].kind == CapturedKind::coll &&
        rank.records[i].coll != CollectiveKind::barrier) {
      seen.inputs[{r, static_cast<int32_t>(i)}] = f.read_input(rank.records[i]);
      seen.steps[{r, static_cast<int32_t>(i)}] = f.steps_before(i);
    }
  });
  seen.together = together(seen.losses);
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
