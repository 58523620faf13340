// grad_norm_miscount (docs/findings.md, "Values in captures"): a norm summed over ranks whose
// terms count a gradient that several of them hold a copy of, once per copy.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "core/scenario/captured_ops.hpp"
#include "core/scenario/captured_values_internal.hpp"

namespace shardcheck::core::values {

namespace {

// -- grad_norm_miscount ------------------------------------------------------------------------

// The gradients a buffer was computed from, each with the number of times its elements are
// counted there (a sum of two terms computed from one gradient counts it twice; a term divided by
// the number of ranks that hold a copy counts it a fraction of once). A gradient is a parameter
// of one rank: an earlier sum over ranks brings other ranks' gradients into a rank's terms.
struct Grad {
  int32_t tensor = 0;
  int rank = 0;
  auto operator<=>(const Grad&) const = default;
};
using Names = std::map<Grad, double>;

void merge_max(Names& into, const Names& from) {
  for (const auto& [t, w] : from) into[t] = std::max(into[t], w);
}

// Operators whose output adds up their operands (stack and cat gather terms a sum then adds).
bool gathers_terms(std::string_view name) {
  return name == "aten::add" || name == "aten::add_" || name == "aten::stack" || name == "aten::cat" ||
         name == "aten::_foreach_add" || name == "aten::_foreach_add_";
}

double scale_at(const CapturedRank& rank, size_t index) {
  auto it = std::lower_bound(rank.scales.begin(), rank.scales.end(),
                             std::pair<int32_t, double>{static_cast<int32_t>(index), -HUGE_VAL});
  return it != rank.scales.end() && it->first == static_cast<int32_t>(index) ? it->second : std::nan("");
}

// Which parameters' gradients each buffer's bytes were computed from, and how many times: seeded
// by the gradients' value records, carried through every operator to what it writes (a write of a
// whole buffer replaces what it held, a partial one adds to it) and through a collective to its
// output, but never into a parameter (the optimizer's update), from which all later compute would
// follow. A small term (a norm's squares) multiplied by a number is counted that many times.
class GradFlow {
 public:
  GradFlow(const CapturedProgram& p, const CapturedRank& rank, int r) : p_(p), rank_(rank) {
    for (const CapturedValue& v : rank.values) {
      if (v.of == Of::grad && v.range.buf >= 0) seed_[v.range.buf][{v.tensor, r}] = 1;
      if (v.of == Of::param && v.range.buf >= 0) params_.insert(v.range.buf);
    }
    for (const CapturedRank::Pre& pre : rank.pre) size_[pre.buf] = pre.bytes;
    seed_copied_from();
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
    if (auto it = flow_.find(buf); it != flow_.end()) merge_max(out, it->second);
    return out;
  }
  // `summed`: for a norm's sum over ranks, what it adds up from every member (else its output is
  // computed from this rank's input alone).
  void record(const CapturedRecord& rec, size_t index, const Names* summed = nullptr) {
    if (rec.kind == CapturedKind::alloc) size_[rec.a] = rec.n;
    if (rec.kind == CapturedKind::free) flow_.erase(rec.a);
    if (rec.kind != CapturedKind::op &&
        (rec.kind != CapturedKind::coll || rec.coll == CollectiveKind::barrier))
      return;
    const std::string_view name = p_.strings[static_cast<size_t>(rec.name)];
    // Terms add up once a gradient is a norm's few numbers; a gradient accumulated into a buffer
    // (main_grad += grad) is the same gradient, once.
    const bool adds = rec.kind == CapturedKind::op && gathers_terms(name) && rec.writes == 1 &&
                      rank_.ranges[rec.first + rec.reads].bytes <= kMaxNormElements * 8 &&
                      !gradient(rank_.ranges[rec.first + rec.reads].buf);
    Names from;
    std::set<std::tuple<int32_t, int64_t, int64_t>> seen;  // a range read twice (x * x) is one operand
    for (uint32_t i = 0; i < rec.reads; ++i) {
      const CapturedRange& r = rank_.ranges[rec.first + i];
      if (!seen.insert({r.buf, r.offset, r.bytes}).second) continue;
      const Names n = of(r.buf);
      if (!adds) merge_max(from, n);
      for (const auto& [t, w] : n) {
        if (adds) from[t] += w;
      }
    }
    if (summed != nullptr) from = *summed;
    const double scale = rec.kind == CapturedKind::op ? scale_at(rank_, index) : std::nan("");
    for (uint32_t i = 0; i < rec.writes; ++i) {
      const CapturedRange& w = rank_.ranges[rec.first + rec.reads + i];
      Names out = from;
      if (!std::isnan(scale) && rec.reads == 1 && w.bytes <= kMaxNormElements * 8) {
        for (auto& [t, x] : out) x *= std::fabs(scale);
      }
      write(w, out);
    }
  }

 private:
  static constexpr int64_t kMaxNormElements = 64;
  // A gradient's bytes may have been copied into the buffer its step took from another one (a
  // main_grad or bucket a norm may read first): those buffers hold the same gradients.
  void seed_copied_from() {
    std::map<int32_t, std::set<int32_t>> sources;  // buffer -> buffers copied into it
    for (const CapturedRecord& rec : rank_.records) {
      if (rec.kind != CapturedKind::op || rec.reads != 1 || rec.writes != 1) continue;
      if (!is_copy_op(p_.strings[static_cast<size_t>(rec.name)])) continue;
      sources[rank_.ranges[rec.first + 1].buf].insert(rank_.ranges[rec.first].buf);
    }
    std::vector<int32_t> todo;
    for (const auto& [buf, names] : seed_) todo.push_back(buf);
    while (!todo.empty()) {
      const int32_t buf = todo.back();
      todo.pop_back();
      const Names names = seed_[buf];
      for (int32_t from : sources[buf]) {
        if (params_.count(from)) continue;
        Names& into = seed_[from];
        const size_t before = into.size();
        merge_max(into, names);
        if (into.size() != before) todo.push_back(from);
      }
    }
  }
  void write(const CapturedRange& r, const Names& from) {
    if (params_.count(r.buf)) return;  // the step updates a parameter: what it computes next is not a norm
    auto size = size_.find(r.buf);
    Names& into = flow_[r.buf];
    if (r.offset == 0 && size != size_.end() && r.bytes >= size->second) into.clear();
    merge_max(into, from);
  }
  const CapturedProgram& p_;
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

using SumKey = std::pair<int32_t, int64_t>;  // a group and the index of a collective on it

// One walk of every rank: the small sums over groups with each member's input. A norm sum's output
// is what `summed` says the members added up, where it says (the walk before this one).
std::map<SumKey, NormSum> norm_walk(const CapturedProgram& p, const std::map<SumKey, Names>& summed) {
  std::map<SumKey, NormSum> out;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const CapturedRank& rank = p.ranks[r];
    GradFlow flow(p, rank, static_cast<int>(r));
    std::map<int32_t, int64_t> k;
    for (size_t i = 0; i < rank.records.size(); ++i) {
      const CapturedRecord& rec = rank.records[i];
      const Names* sum_of = nullptr;
      if (rec.kind == CapturedKind::coll && rec.coll != CollectiveKind::barrier) {
        const int32_t group = rank.groups[static_cast<size_t>(rec.a)];
        const int64_t kth = k[group]++;
        if (rec.coll == CollectiveKind::all_reduce && rec.reduce == ReduceOp::sum &&
            rec.n <= kMaxNormElements && !flow.gradient(rank.ranges[rec.first].buf)) {
          NormSum& sum = out[{group, kth}];
          sum.rec = &rec;
          sum.counted[static_cast<int>(r)] = flow.computed(rank.ranges[rec.first].buf);
          if (auto it = summed.find({group, kth}); it != summed.end()) sum_of = &it->second;
        }
      }
      flow.record(rec, i, sum_of);
    }
  }
  return out;
}

// The norm sums, each member's input with the gradients it was computed from, across ranks: a
// sum's output counts every gradient each member's input counted (a norm's squares summed over a
// group carry every member's gradients into the terms each member computes next). Walked again
// until what each sum adds up is what the walk before said (chains of sums are short).
std::map<SumKey, NormSum> norm_sums(const CapturedProgram& p) {
  constexpr int kMaxWalks = 8;
  std::map<SumKey, Names> summed;
  std::map<SumKey, NormSum> out;
  for (int walk = 0; walk < kMaxWalks; ++walk) {
    out = norm_walk(p, summed);
    std::map<SumKey, Names> next;
    for (const auto& [key, sum] : out) {
      for (const auto& [rank, names] : sum.counted) {
        for (const auto& [g, w] : names) next[key][g] += w;
      }
    }
    if (next == summed) break;
    summed = std::move(next);
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

// A parameter a norm counts more than once: the ranks that hold it (its copies), how many times
// it is counted, and the ranks whose input to the sum counts it.
struct Counted {
  int32_t tensor = 0;
  std::vector<int> ranks;
  double times = 0;
  std::vector<int> in_terms_of;
};

std::string times_text(double x) {
  return std::fabs(x - std::round(x)) < 1e-6 ? std::to_string(static_cast<int64_t>(std::round(x)))
                                             : number(x);
}

Finding norm_finding(const CapturedProgram& p, int32_t group, const NormSum& sum,
                     const std::vector<Counted>& twice) {
  const CapturedGroup& g = p.groups[static_cast<size_t>(group)];
  const std::string at = source_of(p, sum.rec->source);
  std::vector<int32_t> tensors;
  for (const Counted& c : twice) tensors.push_back(c.tensor);
  const Counted& first = twice.front();
  const bool copied = first.ranks.size() > 1;
  const bool brought = !copied && first.in_terms_of.size() > 1;
  Finding f;
  f.kind = FindingKind::grad_norm_miscount;
  f.summary = "all_reduce (sum) at " + at + " over ranks " + ranks_text(g.ranks) +
              " adds up terms computed from the gradient of " + names_text(p, tensors) +
              (copied ? ", which ranks " + ranks_text(first.ranks) + " each hold a copy of"
                      : " on rank " + ranks_text(first.ranks)) +
              (brought ? ", which is in the terms of ranks " + ranks_text(first.in_terms_of) +
                             " (an earlier sum over ranks added it to each of them)"
                       : "") +
              ": it is counted " + times_text(first.times) + " times";
  std::string e = f.summary +
                  ".\nA norm over ranks must count each gradient element once; a replicated or tied "
                  "tensor held by several of them (a tied embedding on two pipeline stages, a norm's "
                  "weight on every tensor-parallel rank) is counted once per copy, and a term summed twice "
                  "on one rank (the same storage twice in the list) twice, and squares an earlier sum over "
                  "the group already added up are counted once per member when summed over it again, so the "
                  "norm is too large and clipping scales every gradient by the wrong factor (Megatron-LM "
                  "#7227, NeMo-RL #3788, fastmoe #169).\n";
  for (size_t i = 0; i < twice.size() && i < 8; ++i) {
    const Counted& c = twice[i];
    e += "  " + p.strings[static_cast<size_t>(c.tensor)] + ": counted " + times_text(c.times) + " times, ";
    if (c.ranks.size() > 1) {
      e += "on ranks " + ranks_text(c.ranks) + ", the same gradient on each\n";
    } else {
      e += "rank " + ranks_text(c.ranks) + "'s gradient" +
           (c.in_terms_of.size() > 1 ? ", in the terms of ranks " + ranks_text(c.in_terms_of) : "") + "\n";
    }
  }
  f.explanation =
      e + (brought ? std::string("Fix: sum each rank's squares over the group once, or reduce the "
                                 "earlier partial sum over a group whose members hold other "
                                 "parameters (the data-parallel group for experts that differ "
                                 "across it).")
                   : std::string("Fix: count a tensor replicated over the group on one of its ranks "
                                 "only (Megatron: param_is_not_tensor_parallel_duplicate, the shared "
                                 "embedding on the first stage), or divide its term by its number of "
                                 "copies."));
  f.key = "grad_norm_miscount at " + at;
  NormDetail d;
  d.expected = d.reported = std::nan("");  // known by what it counts, not by its value
  d.rank = first.ranks.front();
  d.source = line_of(p, sum.rec->source);
  for (const Counted& c : twice)
    d.params.push_back({p.strings[static_cast<size_t>(c.tensor)], static_cast<int>(std::lround(c.times))});
  f.detail = d;
  return f;
}

// The parameter `tensor` of the ranks in `same` (its copies, one parameter) or of one rank: how
// many times the sum's inputs count it, and whose inputs do.
Counted count_of(int32_t tensor, const std::vector<int>& same,
                 const std::map<int, std::map<int, double>>& by_origin) {
  Counted c{tensor, same, 0, {}};
  std::set<int> in;
  for (int o : same) {
    auto it = by_origin.find(o);
    if (it == by_origin.end()) continue;
    for (const auto& [r, w] : it->second) {
      c.times += w;
      in.insert(r);
    }
  }
  c.in_terms_of.assign(in.begin(), in.end());
  return c;
}

}  // namespace

// How many times a norm's sum over ranks counts each parameter's gradient: over the ranks that
// hold the same gradient (copies, one parameter), the times every member's input counted any of
// them; for a gradient each rank holds its own of, the times every member's input counted that
// rank's. Once is right.
void norm_findings(const CapturedProgram& p, std::vector<Finding>& out) {
  for (const auto& [key, sum] : norm_sums(p)) {
    // parameter -> the rank whose gradient it is -> the member whose input counts it -> times
    std::map<int32_t, std::map<int, std::map<int, double>>> counted_on;
    for (const auto& [rank, names] : sum.counted) {
      for (const auto& [g, w] : names) counted_on[g.tensor][g.rank][rank] = w;
    }
    std::vector<Counted> over;
    for (const auto& [tensor, by_origin] : counted_on) {
      std::vector<int> origins;
      for (const auto& [o, by_rank] : by_origin) origins.push_back(o);
      const std::vector<int> same = copies(p, tensor, origins, sum.rec->n);
      Counted most = same.empty() ? Counted{} : count_of(tensor, same, by_origin);
      for (int o : origins) {
        if (std::find(same.begin(), same.end(), o) != same.end()) continue;
        Counted c = count_of(tensor, {o}, by_origin);
        if (c.times > most.times) most = c;
      }
      if (most.times > 1 + 1e-6) over.push_back(most);
    }
    if (over.empty()) continue;
    Finding f = norm_finding(p, key.first, sum, over);
    for (const auto& [rank, names] : sum.counted) {
      join_spread(f.spread,
                  spread_of(std::to_string(key.first) + ":" + std::to_string(key.second), rank, {}));
    }
    add_finding(out, std::move(f));
  }
}

}  // namespace shardcheck::core::values
