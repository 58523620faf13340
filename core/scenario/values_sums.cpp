// double_reduction and divisor_mismatch (docs/findings.md, "Values in captures"): a sum over
// ranks of what a reduction over some of them already combined, and a gradient whose ranks'
// losses are weighed other than by their number.
#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>
#include <set>
#include <string>

#include "core/scenario/captured_values_internal.hpp"

namespace shardcheck::core::values {

namespace {

bool sums(const CapturedRecord& rec) {
  return rec.kind == CapturedKind::coll &&
         (rec.coll == CollectiveKind::all_reduce || rec.coll == CollectiveKind::reduce_scatter ||
          rec.coll == CollectiveKind::reduce) &&
         rec.reduce == ReduceOp::sum;
}

std::vector<int> common(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// One gradient as its optimizer step took it: the sum it came from, the ranks whose losses it
// carries, and the weight each of them has in it.
struct Weighed {
  int rank = 0;
  int32_t tensor = 0, step = 0;
  int32_t reduction = -1;  // the sum's record on the rank
  int32_t divided = -1;    // the record of the scaling that set the weight (-1: none seen)
  int terms = 0;           // ranks whose losses it carries
  RankMask carried = 0;
  double weight = 0;
  const CapturedValue* grad = nullptr;
  int32_t doubled_at = -1, doubled_from = -1;  // a sum of copies it came out of (ValueFact)
  int copies = 0;
};

const CapturedValue* digest_of(const CapturedRank& rank, Of of, int32_t record_or_tensor, int32_t step) {
  for (const CapturedValue& v : rank.values) {
    if (v.of != of) continue;
    if ((of == Of::coll_out && v.record == record_or_tensor) ||
        (of == Of::grad && v.tensor == record_or_tensor && v.step == step))
      return &v;
  }
  return nullptr;
}

// The factor between a reduction's output and the gradient, from their digests' absolute sums
// (which a scaling changes exactly up to rounding), where it is a whole number or its inverse.
double measured(const CapturedValue& out, const CapturedValue& grad) {
  if (out.elements != grad.elements || out.uniform || !(grad.abs_sum > 0) || !std::isfinite(out.abs_sum))
    return std::nan("");
  const double k = out.abs_sum / grad.abs_sum;
  for (double x : {k, 1 / k}) {
    const double whole = std::round(x);
    if (whole >= 1 && whole < 1e6 && std::fabs(x - whole) <= 1e-4 * whole) return x == k ? whole : 1 / whole;
  }
  return std::nan("");
}

std::optional<Weighed> weighed(const CapturedProgram& p, const Observed& seen, const TensorStep& key,
                               const ValueFact& f) {
  const auto& [r, tensor, step] = key;
  if (f.reduction < 0 || f.terms == 0) return std::nullopt;
  const CapturedRank& rank = p.ranks[static_cast<size_t>(r)];
  Weighed w{r,
            tensor,
            step,
            f.reduction,
            f.scaled_at,
            seen.losses_in(f.terms),
            f.terms,
            f.weight.lo,
            digest_of(rank, Of::grad, tensor, step),
            f.doubled_at,
            f.doubled_from,
            f.copies};
  if (!f.weight.single()) {  // scaled by a number the capture did not know: the digests say by what
    const CapturedValue* out = digest_of(rank, Of::coll_out, f.reduction, 0);
    if (out == nullptr || w.grad == nullptr || std::isnan(f.at_reduction)) return std::nullopt;
    const double k = measured(*out, *w.grad);
    if (std::isnan(k)) return std::nullopt;
    w.weight = f.at_reduction / k;
    w.divided = f.via;
  }
  if (w.divided < 0) {  // scaled before the sum
    auto in = seen.inputs.find({r, f.reduction});
    if (in != seen.inputs.end()) w.divided = in->second.scaled_at;
  }
  return w;
}

bool averaged(const Weighed& w) { return std::fabs(w.weight * w.terms - 1) <= 1e-6; }

// -- double_reduction --------------------------------------------------------------------------

// A sum on one rank whose input a reduction earlier in the same optimizer step made, over a
// group sharing at least two ranks with this one.
struct Again {
  int rank = 0;
  int32_t record = 0, earlier = 0;
  std::vector<int> both;  // the ranks both groups hold
};

// The k-th collective of each group, by rank: its record there.
using Instances = std::map<std::pair<int32_t, int64_t>, std::map<int, int32_t>>;

Instances instances(const CapturedProgram& p) {
  Instances out;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    std::map<int32_t, int64_t> k;
    const CapturedRank& rank = p.ranks[r];
    for (size_t i = 0; i < rank.records.size(); ++i) {
      const CapturedRecord& rec = rank.records[i];
      if (rec.kind != CapturedKind::coll) continue;
      const int32_t g = rank.groups[static_cast<size_t>(rec.a)];
      out[{g, k[g]++}][static_cast<int>(r)] = static_cast<int32_t>(i);
    }
  }
  return out;
}

// Whether the earlier reduction's own output holds something else than it wrote by the time it is
// summed again (written in between where the capture does not see: DDP's copies into its bucket),
// from the two digests, where both cover the whole buffer alike.
bool rewritten(const CapturedRank& rank, const ValueFact& f, int32_t i) {
  if (f.via >= 0) return false;
  const CapturedValue *out = nullptr, *in = nullptr;
  for (const CapturedValue& v : rank.values) {
    if (v.of == Of::coll_out && v.record == f.reduction) out = &v;
    if (v.of == Of::coll_in && v.record == i) in = &v;
  }
  return out != nullptr && in != nullptr && out->elements == in->elements && out->hash != in->hash;
}

std::optional<Again> again(const CapturedProgram& p, const Observed& seen, int r, int32_t i) {
  const CapturedRecord& rec = p.ranks[static_cast<size_t>(r)].records[static_cast<size_t>(i)];
  auto in = seen.inputs.find({r, i});
  if (!sums(rec) || in == seen.inputs.end() || in->second.reduction < 0) return std::nullopt;
  const ValueFact& f = in->second;
  if (f.step != seen.steps.at({r, i}))
    return std::nullopt;  // a buffer summed at the next step holds its gradients
  const CapturedRecord& earlier = p.ranks[static_cast<size_t>(r)].records[static_cast<size_t>(f.reduction)];
  std::vector<int> both = common(group_of(p, r, earlier).ranks, group_of(p, r, rec).ranks);
  if (both.size() < 2 || rewritten(p.ranks[static_cast<size_t>(r)], f, i)) return std::nullopt;
  return Again{r, i, f.reduction, std::move(both)};
}

// Whether the members that both groups hold passed in the same bytes where their digests say
// (a reduction's output that holds something else by the time it is summed again was written in
// between where the capture does not see: DDP's copies into its bucket).
bool same_inputs(const CapturedProgram& p, const std::map<int, int32_t>& members,
                 const std::vector<int>& both) {
  std::map<int, const CapturedValue*> digests;
  for (int r : both) {
    auto at = members.find(r);
    if (at == members.end()) continue;
    for (const CapturedValue& v : p.ranks[static_cast<size_t>(r)].values) {
      if (v.of == Of::coll_in && v.record == at->second) digests[r] = &v;
    }
  }
  if (digests.size() < 2) return true;
  std::set<uint64_t> hashes;
  for (const auto& [r, v] : digests) {
    if (v->uniform) return false;  // one repeated value: nothing says it was reduced
    if (!hashes.insert(v->hash).second) return true;
  }
  return false;
}

Finding double_finding(const CapturedProgram& p, const Again& a) {
  const CapturedRank& rank = p.ranks[static_cast<size_t>(a.rank)];
  const CapturedRecord& rec = rank.records[static_cast<size_t>(a.record)];
  const CapturedRecord& earlier = rank.records[static_cast<size_t>(a.earlier)];
  const CapturedGroup& g = group_of(p, a.rank, rec);
  const std::string op(to_string(rec.coll)), first(to_string(earlier.coll));
  const std::string at = source_of(p, rec.source), before = source_of(p, earlier.source);
  const std::string times = std::to_string(a.both.size());
  const std::string name = p.strings[static_cast<size_t>(rec.name)];
  const bool whole = a.both.size() == g.ranks.size();
  Finding f;
  f.kind = FindingKind::double_reduction;
  f.summary = op + " (sum) at " + at + " over ranks " + ranks_text(g.ranks) + " sums what " + first + " at " +
              before + " already reduced over " +
              (whole ? "them: the result is " + times + " times it"
                     : "ranks " + ranks_text(a.both) + ": the result counts it " + times + " times");
  f.explanation =
      f.summary + ".\nThe input of " + op + (name.empty() ? "" : " '" + name + "'") + " at " + at +
      " is the output of the " + first + " at " + before + " over ranks " +
      ranks_text(group_of(p, a.rank, earlier).ranks) +
      " in the same optimizer step, carried only through copies, scalings and elementwise operators: ranks " +
      ranks_text(a.both) + " each hold that same sum, and adding them up counts every rank's contribution " +
      times +
      " times: a gradient reduced twice, as when DDP (or a gradient hook) has averaged it and the program "
      "sums it "
      "again (pytorch #160285).\nFix: reduce it once: leave the reduction to DDP or FSDP, or take these "
      "parameters "
      "out of theirs (DDP's _set_params_and_buffers_to_ignore_for_model) and reduce them yourself.";
  f.key = "double_reduction at " + at;
  ElementDetail detail;
  detail.tensor = name;
  detail.rank = a.both[0];
  detail.other_rank = a.both[1];
  detail.note = "summed " + times + " copies of a reduced value";
  detail.expected = 1;
  detail.actual = static_cast<double>(a.both.size());
  detail.source = line_of(p, rec.source);
  f.detail = detail;
  return f;
}

}  // namespace

namespace {

// Every gradient an optimizer step took that a sum made, by (rank, step), with its weights.
std::map<std::pair<int, int32_t>, std::vector<Weighed>> weigh_all(const CapturedProgram& p,
                                                                  const Observed& seen) {
  std::map<std::pair<int, int32_t>, std::vector<Weighed>> by_step;
  for (const auto& [key, f] : seen.grads) {
    if (std::optional<Weighed> w = weighed(p, seen, key, f))
      by_step[{std::get<0>(key), std::get<2>(key)}].push_back(*w);
  }
  return by_step;
}

// A gradient that came out of a sum of copies and still counts each rank's loss once per copy.
bool counted_twice(const Weighed& w) {
  return w.doubled_at >= 0 && std::fabs(w.weight * w.terms - w.copies) <= 1e-6 * w.copies;
}

Finding copies_finding(const CapturedProgram& p, const std::vector<const Weighed*>& site) {
  const Weighed& s = *site.front();
  const CapturedRank& rank = p.ranks[static_cast<size_t>(s.rank)];
  const CapturedRecord& rec = rank.records[static_cast<size_t>(s.doubled_at)];
  const std::string op(to_string(rec.coll)), at = source_of(p, rec.source), times = std::to_string(s.copies);
  std::string made = "a reduction the capture did not see";
  if (s.doubled_from >= 0) {
    const CapturedRecord& first = rank.records[static_cast<size_t>(s.doubled_from)];
    made = std::string(to_string(first.coll)) + " at " + source_of(p, first.source);
  }
  std::set<int32_t> names;
  for (const Weighed* x : site) names.insert(x->tensor);
  Finding f;
  f.kind = FindingKind::double_reduction;
  f.summary = op + " (sum) at " + at + " over ranks " + ranks_text(group_of(p, s.rank, rec).ranks) +
              " adds up copies of what " + made +
              " already made whole on each of them: the result counts every "
              "rank's loss " +
              times + " times";
  f.explanation = f.summary +
                  ".\nEvery member passed in the same bytes, carrying the losses of the same ranks (" +
                  ranks_text(ranks_of(s.carried)) + "): each already the whole sum, as the " + made +
                  " made it. Adding " + times + " copies of it counts each of those losses " + times +
                  " times, and nothing divided it back: the gradients of " +
                  names_text(p, {names.begin(), names.end()}, 4) + " step with " + times +
                  " times their value (a gradient reduced twice, pytorch #160285; or a replicated "
                  "parameter's gradient, already whole on every tensor-parallel rank, summed over them "
                  "again).\nFix: reduce "
                  "it once: leave the reduction to DDP or FSDP, or take these parameters out of theirs, or "
                  "divide the second "
                  "sum by " +
                  times + ".";
  f.key = "double_reduction at " + at;
  ElementDetail detail;
  detail.tensor = p.strings[static_cast<size_t>(s.tensor)];
  detail.step = s.step;
  detail.rank = detail.other_rank = s.rank;
  detail.note = "summed " + times + " copies of a reduced value";
  detail.expected = s.grad ? s.grad->sum / s.copies : 1;
  detail.actual = s.grad ? s.grad->sum : s.copies;
  detail.source = line_of(p, rec.source);
  f.detail = detail;
  for (const Weighed* x : site)
    join_spread(f.spread, spread_of(p.strings[static_cast<size_t>(x->tensor)], x->rank, {}));
  return f;
}

}  // namespace

// A gradient whose weights show that a sum added up copies of one value and nothing divided it
// back is a double reduction at that sum. Where no gradient's weights say (a norm, a capture
// without the numbers it was scaled by), a sum of a reduction's output carried only through
// copies, scalings and elementwise operators, the same bytes on every member, is one.
void double_findings(const CapturedProgram& p, const Observed& seen, std::vector<Finding>& out) {
  std::set<std::pair<int, int32_t>> decided;  // (rank, sum of copies): what its gradients say
  std::map<std::pair<int32_t, int32_t>, std::vector<const Weighed*>> sites;
  const auto by_step = weigh_all(p, seen);
  for (const auto& [rs, all] : by_step) {
    for (const Weighed& w : all) {
      if (w.doubled_at < 0) continue;
      decided.insert({w.rank, w.doubled_at});
      if (!counted_twice(w)) continue;
      const CapturedRank& rank = p.ranks[static_cast<size_t>(w.rank)];
      const int32_t from =
          w.doubled_from >= 0 ? rank.records[static_cast<size_t>(w.doubled_from)].source : -1;
      sites[{rank.records[static_cast<size_t>(w.doubled_at)].source, from}].push_back(&w);
    }
  }
  for (const auto& [key, site] : sites) add_finding(out, copies_finding(p, site));
  for (const auto& [key, members] : instances(p)) {
    for (const auto& [r, i] : members) {
      if (decided.count({r, i})) break;
      const std::optional<Again> a = again(p, seen, r, i);
      if (!a || !same_inputs(p, members, a->both)) continue;
      Finding f = double_finding(p, *a);
      for (const auto& [rank, rec] : members)
        join_spread(f.spread,
                    spread_of(std::to_string(key.first) + ":" + std::to_string(key.second), rank, {}));
      add_finding(out, std::move(f));
      break;
    }
  }
}

// -- divisor_mismatch --------------------------------------------------------------------------

namespace {

// The size of a group of rank `r` that equals `size` (by name), for the text; "" when none.
std::string group_named(const CapturedProgram& p, int r, double size) {
  for (int32_t g : p.ranks[static_cast<size_t>(r)].groups) {
    const CapturedGroup& x = p.groups[static_cast<size_t>(g)];
    if (static_cast<double>(x.ranks.size()) == size && std::binary_search(x.ranks.begin(), x.ranks.end(), r))
      return (x.name.empty() ? "a group" : "group '" + x.name + "'") + " (ranks " + ranks_text(x.ranks) + ")";
  }
  return "";
}

std::string divisor_text(double weight) {
  const double k = 1 / weight;
  return std::fabs(k - std::round(k)) < 1e-6 ? std::to_string(static_cast<int64_t>(std::round(k)))
                                             : number(k);
}

Finding divisor_finding(const CapturedProgram& p, const std::vector<const Weighed*>& site,
                        const std::vector<const Weighed*>& fine) {
  const Weighed& s = *site.front();
  const CapturedRank& rank = p.ranks[static_cast<size_t>(s.rank)];
  const CapturedRecord& red = rank.records[static_cast<size_t>(s.reduction)];
  const CapturedGroup& g = group_of(p, s.rank, red);
  const std::string k = divisor_text(s.weight), n = std::to_string(s.terms);
  const std::string at = s.divided >= 0 ? source_of(p, rank.records[static_cast<size_t>(s.divided)].source)
                                        : source_of(p, red.source);
  std::set<int32_t> names, others;
  for (const Weighed* x : site) names.insert(x->tensor);
  for (const Weighed* x : fine) others.insert(x->tensor);
  const std::string what = names_text(p, {names.begin(), names.end()}, 4);
  const std::string other = static_cast<double>(g.ranks.size()) == std::round(1 / s.weight)
                                ? "the group that summed (ranks " + ranks_text(g.ranks) + ")"
                                : group_named(p, s.rank, 1 / s.weight);
  Finding f;
  f.kind = FindingKind::divisor_mismatch;
  f.summary = std::string(to_string(red.coll)) + " (" + (red.reduce == ReduceOp::avg ? "avg" : "sum") +
              ") at " + source_of(p, red.source) + " over ranks " + ranks_text(g.ranks) + ", divided by " +
              k + " at " + at + ": the sum carries the losses of " + n + " ranks (" +
              ranks_text(ranks_of(s.carried)) + "), so their average divides by " + n + ", not " + k;
  std::string e = f.summary + ".\nThe gradients of " + what +
                  " as the optimizer step took them weigh each rank's loss 1/" + k +
                  "; the other parameters' there (" + names_text(p, {others.begin(), others.end()}, 3) +
                  ") weigh it 1/" + std::to_string(fine.front()->terms) +
                  ", the average over the ranks they carry. ";
  e += (other.empty() ? k + " is no group's size here" : k + " is the size of " + other) +
       ": a divisor meant for another group, as when expert gradients, whose all_to_all brought each expert "
       "the "
       "tokens of every rank of its expert-parallel group, are summed over their expert-data-parallel group "
       "and "
       "divided by that group's size instead of the data-parallel world's (DeepSpeed #6546, #5259).\n";
  if (s.grad != nullptr)
    e += "  rank " + std::to_string(s.rank) + ", step " + std::to_string(s.step) + ": gradient sum " +
         number(s.grad->sum) + ", averaged it would be " + number(s.grad->sum / (s.weight * s.terms)) + "\n";
  f.explanation = e + "Fix: divide by " + n +
                  ", the number of ranks whose losses the sum carries (the data-parallel world size, as for "
                  "the other parameters), not by the size of the group that summed.";
  f.key = "divisor_mismatch at " + at + " " + source_of(p, red.source);
  ElementDetail detail;
  detail.step = s.step;
  detail.tensor = p.strings[static_cast<size_t>(s.tensor)];
  detail.rank = detail.other_rank = s.rank;
  detail.expected = s.grad ? s.grad->sum / (s.weight * s.terms) : 0;
  detail.actual = s.grad ? s.grad->sum : 0;
  detail.note = "divided by " + k + " where " + n + " was due";
  detail.source = s.divided >= 0 ? line_of(p, rank.records[static_cast<size_t>(s.divided)].source)
                                 : line_of(p, red.source);
  f.detail = detail;
  for (const Weighed* x : site)
    join_spread(f.spread, spread_of(p.strings[static_cast<size_t>(x->tensor)], x->rank, {}));
  return f;
}

}  // namespace

// At each optimizer step of each rank, gradients that are sums over ranks must weigh every rank's
// loss they carry by one over their number. Where some gradient there does, every other that
// does not is a finding (where none does, the program may scale its loss itself: nothing to say).
void divisor_findings(const CapturedProgram& p, const Observed& seen, std::vector<Finding>& out) {
  const auto by_step = weigh_all(p, seen);
  std::map<std::pair<int32_t, int32_t>, std::pair<std::vector<const Weighed*>, std::vector<const Weighed*>>>
      sites;
  for (const auto& [rs, all] : by_step) {
    std::vector<const Weighed*> fine, off;
    for (const Weighed& w : all) {
      if (!counted_twice(w))
        (averaged(w) ? fine : off).push_back(&w);  // a sum of copies: the double's to say
    }
    if (fine.empty()) continue;
    for (const Weighed* w : off) {
      const CapturedRank& rank = p.ranks[static_cast<size_t>(w->rank)];
      const int32_t div = w->divided >= 0 ? rank.records[static_cast<size_t>(w->divided)].source : -1;
      auto& [site, ok] = sites[{div, rank.records[static_cast<size_t>(w->reduction)].source}];
      site.push_back(w);
      if (ok.empty()) ok = fine;
    }
  }
  for (const auto& [key, s] : sites) add_finding(out, divisor_finding(p, s.first, s.second));
}

}  // namespace shardcheck::core::values
