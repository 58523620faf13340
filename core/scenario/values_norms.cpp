// grad_norm_miscount (docs/findings.md, "Values in captures"): a norm summed over ranks whose
// terms count a gradient that several of them hold a copy of, once per copy.
#include <cmath>
#include <set>
#include <string>

#include "core/scenario/captured_values_internal.hpp"

namespace shardcheck::core::values {

namespace {

// -- grad_norm_miscount ------------------------------------------------------------------------

using Names = std::set<int32_t>;  // parameters, by their name's string index

// Which parameters' gradients each buffer's bytes were computed from: seeded by the gradients'
// value records, carried through every operator to what it writes (a write of a whole buffer
// replaces what it held, a partial one adds to it) and through a collective to its output, but
// never into a parameter (the optimizer's update), from which all later compute would follow.
class GradFlow {
 public:
  explicit GradFlow(const CapturedRank& rank) : rank_(rank) {
    for (const CapturedValue& v : rank.values) {
      if (v.of == Of::grad && v.range.buf >= 0) seed_[v.range.buf].insert(v.tensor);
      if (v.of == Of::param && v.range.buf >= 0) params_.insert(v.range.buf);
    }
    for (const CapturedRank::Pre& pre : rank.pre) size_[pre.buf] = pre.bytes;
  }
  // What was computed into `buf` from gradients (not a gradient's own buffer: its reduction is
  // no norm).
  Names computed(int32_t buf) const {
    auto it = flow_.find(buf);
    return it == flow_.end() ? Names{} : it->second;
  }
  // A gradient's own buffer (what an optimizer step took): summing it is a reduction, no norm,
  // whatever it was copied from (DDP copies each gradient out of its flat bucket).
  bool gradient(int32_t buf) const { return seed_.count(buf) != 0; }
  Names of(int32_t buf) const {
    Names out;
    if (auto it = seed_.find(buf); it != seed_.end()) out = it->second;
    if (auto it = flow_.find(buf); it != flow_.end()) out.insert(it->second.begin(), it->second.end());
    return out;
  }
  void record(const CapturedRecord& rec) {
    if (rec.kind == CapturedKind::alloc) size_[rec.a] = rec.n;
    if (rec.kind == CapturedKind::free) flow_.erase(rec.a);
    if (rec.kind != CapturedKind::op &&
        (rec.kind != CapturedKind::coll || rec.coll == CollectiveKind::barrier))
      return;
    Names from;
    for (uint32_t i = 0; i < rec.reads; ++i) {
      const Names n = of(rank_.ranges[rec.first + i].buf);
      from.insert(n.begin(), n.end());
    }
    for (uint32_t i = 0; i < rec.writes; ++i) write(rank_.ranges[rec.first + rec.reads + i], from);
  }

 private:
  void write(const CapturedRange& r, const Names& from) {
    if (params_.count(r.buf)) return;  // the step updates a parameter: what it computes next is not a norm
    auto size = size_.find(r.buf);
    Names& into = flow_[r.buf];
    if (r.offset == 0 && size != size_.end() && r.bytes >= size->second) into.clear();
    into.insert(from.begin(), from.end());
  }
  const CapturedRank& rank_;
  std::map<int32_t, Names> seed_, flow_;
  std::set<int32_t> params_;  // the parameters' buffers
  std::map<int32_t, int64_t> size_;
};

// A small sum over a group (a norm's squares, a few elements): each member's input, with the
// parameters whose gradients it was computed from.
struct NormSum {
  const CapturedRecord* rec = nullptr;
  std::map<int, Names> counted;  // rank -> parameters
};

constexpr int64_t kMaxNormElements = 64;

std::map<std::pair<int32_t, int64_t>, NormSum> norm_sums(const CapturedProgram& p) {
  std::map<std::pair<int32_t, int64_t>, NormSum> out;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const CapturedRank& rank = p.ranks[r];
    GradFlow flow(rank);
    std::map<int32_t, int64_t> k;
    for (const CapturedRecord& rec : rank.records) {
      if (rec.kind == CapturedKind::coll && rec.coll != CollectiveKind::barrier) {
        const int32_t group = rank.groups[static_cast<size_t>(rec.a)];
        const int64_t kth = k[group]++;
        if (rec.coll == CollectiveKind::all_reduce && rec.reduce == ReduceOp::sum &&
            rec.n <= kMaxNormElements && !flow.gradient(rank.ranges[rec.first].buf)) {
          NormSum& sum = out[{group, kth}];
          sum.rec = &rec;
          sum.counted[static_cast<int>(r)] = flow.computed(rank.ranges[rec.first].buf);
        }
      }
      flow.record(rec);
    }
  }
  return out;
}

// The ranks among `ranks` whose gradient of `tensor` was the same (and not one repeated value) at
// some optimizer step: the copies of a replicated or tied parameter. Only gradients larger than
// the sum (`elements`): a norm's term reduces its tensor to fewer values.
std::vector<int> copies(const CapturedProgram& p, int32_t tensor, const std::vector<int>& ranks,
                        int64_t elements) {
  std::map<int32_t, ByRank> by_step;
  for (int r : ranks) {
    for (const CapturedValue& v : p.ranks[static_cast<size_t>(r)].values) {
      if (v.of == Of::grad && v.tensor == tensor && !v.uniform && v.elements > elements)
        by_step[v.step].emplace(r, &v);
    }
  }
  std::vector<int> best;
  for (const auto& [step, m] : by_step) {
    for (const std::vector<int>& c : classes(m)) {
      if (c.size() > best.size()) best = c;
    }
  }
  return best.size() >= 2 ? best : std::vector<int>{};
}

Finding norm_finding(const CapturedProgram& p, int32_t group, const NormSum& sum,
                     const std::vector<std::pair<int32_t, std::vector<int>>>& twice) {
  const CapturedGroup& g = p.groups[static_cast<size_t>(group)];
  const std::string at = source_of(p, sum.rec->source);
  std::string names;
  for (size_t i = 0; i < twice.size() && i < 3; ++i)
    names += (i ? ", '" : "'") + p.strings[static_cast<size_t>(twice[i].first)] + "'";
  if (twice.size() > 3) names += " and " + std::to_string(twice.size() - 3) + " more";
  const std::vector<int>& first = twice.front().second;
  Finding f;
  f.kind = FindingKind::grad_norm_miscount;
  f.summary = "all_reduce (sum) at " + at + " over ranks " + ranks_text(g.ranks) +
              " adds up terms computed from the gradient of " + names + ", which ranks " + ranks_text(first) +
              " each hold a copy of: it is counted " + std::to_string(first.size()) + " times";
  std::string e = f.summary +
                  ".\nA norm over ranks must count each gradient element once; a replicated or tied "
                  "tensor held by several of them (a tied embedding on two pipeline stages, a norm's "
                  "weight on every tensor-parallel rank) is counted once per copy, so the norm is too "
                  "large and clipping scales every gradient by the wrong factor (Megatron-LM #7227, "
                  "NeMo-RL #3788).\n";
  for (size_t i = 0; i < twice.size() && i < 8; ++i) {
    e += "  " + p.strings[static_cast<size_t>(twice[i].first)] + ": counted on ranks " +
         ranks_text(twice[i].second) + ", the same gradient on each\n";
  }
  f.explanation = e +
                  "Fix: count a tensor replicated over the group on one of its ranks only (Megatron: "
                  "param_is_not_tensor_parallel_duplicate, the shared embedding on the first stage), or "
                  "divide its term by its number of copies.";
  f.key = "grad_norm_miscount at " + at;
  NormDetail d;
  d.expected = d.reported = std::nan("");  // known by what it counts, not by its value
  d.rank = first.front();
  d.source = line_of(p, sum.rec->source);
  for (const auto& [tensor, ranks] : twice)
    d.params.push_back({p.strings[static_cast<size_t>(tensor)], static_cast<int>(ranks.size())});
  f.detail = d;
  return f;
}

}  // namespace

void norm_findings(const CapturedProgram& p, std::vector<Finding>& out) {
  for (const auto& [key, sum] : norm_sums(p)) {
    std::map<int32_t, std::vector<int>> counted_on;  // parameter -> the ranks whose term has it
    for (const auto& [rank, names] : sum.counted) {
      for (int32_t t : names) counted_on[t].push_back(rank);
    }
    std::vector<std::pair<int32_t, std::vector<int>>> twice;
    for (const auto& [tensor, ranks] : counted_on) {
      if (ranks.size() < 2) continue;
      std::vector<int> same = copies(p, tensor, ranks, sum.rec->n);
      if (!same.empty()) twice.emplace_back(tensor, std::move(same));
    }
    if (twice.empty()) continue;
    Finding f = norm_finding(p, key.first, sum, twice);
    for (const auto& [rank, names] : sum.counted) {
      join_spread(f.spread,
                  spread_of(std::to_string(key.first) + ":" + std::to_string(key.second), rank, {}));
    }
    add_finding(out, std::move(f));
  }
}

}  // namespace shardcheck::core::values
