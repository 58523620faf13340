// replica_divergence and missing_reduction (docs/findings.md, "Values in captures"): parameters
// that held one value on several ranks before an optimizer step and differ on them after it, and
// whether the gradients the step took came from a reduction over all of them.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "core/scenario/captured_values_internal.hpp"

namespace shardcheck::core::values {

namespace {

// gradient: the gradients differed though a reduction over every replica made them; unreduced:
// they differed and none did (a missing reduction, its own kind).
enum class Cause { gradient, update, between, unreduced, changed };

struct Divergence {
  int32_t tensor = 0;
  int32_t step = 0;
  int32_t source = -1;  // the optimizer step's line
  Cause cause = Cause::gradient;
  std::vector<int> replicas;               // the ranks that held one value
  ByRank apart;                            // what they held once it differed
  int32_t partial = -1;                    // unreduced: a group it was reduced over, short of the replicas
  std::pair<int, int32_t> others{-1, -1};  // unreduced: (rank, record) reducing other parameters
  // gradient: (rank, the reduction over every replica, the last operator after it) where the
  // gradients came out of the reduction the same and something changed them after it
  std::tuple<int, int32_t, int32_t> changed{-1, -1, -1};
};

struct Stepped {
  ByRank before, after, grad;
  int32_t source = -1;
};

using Steps = std::map<std::pair<int32_t, int32_t>, Stepped>;  // (tensor, step)

// The module that holds a parameter: its name up to the last dot ("" at the top).
std::string module_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

bool under(const std::string& name, const std::string& module) {
  return module.empty() || (name.size() > module.size() && name.compare(0, module.size(), module) == 0 &&
                            name[module.size()] == '.');
}

// Which ranks hold a copy of a parameter whose value says nothing of it (one repeated value, a
// zero bias or a LayerNorm weight of ones): where the nearest module above it that holds
// evidence holds a parameter the same as rank `r` does, one of varied values or one whose
// gradient the program reduces over those ranks (the ranks hold copies of that module, or of
// its replicated part beside the parts tensor parallelism splits). Nothing where no module above
// it holds such evidence.
class Modules {
 public:
  Modules(const CapturedProgram& p, const Steps& steps, const Observed& seen)
      : p_(p), steps_(steps), seen_(seen) {}
  RankMask replicas(int32_t tensor, int32_t step, int r) {
    for (std::string m = module_of(p_.strings[static_cast<size_t>(tensor)]);; m = module_of(m)) {
      auto [it, fresh] = known_.try_emplace({m, step, r}, 0);
      if (fresh) it->second = evidence(m, step, r);
      if (it->second != 0 || m.empty()) return it->second;
    }
  }

 private:
  // The ranks that hold some parameter of module `m` as rank r does, where that says it is a copy:
  // one of varied values, or one whose gradient the program reduces over them (it treats them as
  // copies); 0 where there is none.
  RankMask evidence(const std::string& m, int32_t step, int r) const {
    RankMask out = 0;
    for (const auto& [key, st] : steps_) {
      if (key.second != step || !under(p_.strings[static_cast<size_t>(key.first)], m)) continue;
      auto mine = st.before.find(r);
      if (mine == st.before.end() || mine->second->elements == 0) continue;
      RankMask same = 0;
      for (const auto& [rank, v] : st.before) {
        if (v->hash == mine->second->hash) same |= rank_bit(rank);
      }
      out |= mine->second->uniform ? same & reduced_over(key.first, step, r) : same;
    }
    return out;
  }
  // The ranks of the sum over a group that made rank r's gradient of `tensor` at `step`.
  RankMask reduced_over(int32_t tensor, int32_t step, int r) const {
    auto it = seen_.grads.find({r, tensor, step});
    if (it == seen_.grads.end() || it->second.reduction < 0) return 0;
    const CapturedRecord& rec =
        p_.ranks[static_cast<size_t>(r)].records[static_cast<size_t>(it->second.reduction)];
    return rec.kind == CapturedKind::coll ? mask_of(group_of(p_, r, rec).ranks) : 0;
  }
  const CapturedProgram& p_;
  const Steps& steps_;
  const Observed& seen_;
  std::map<std::tuple<std::string, int32_t, int>, RankMask> known_;
};

// The ranks among `held` (which held one value before the step) that hold copies of the
// parameter: all of them where the value is varied; where it is one repeated value, those the
// walk saw made replicas (a broadcast, DDP's, a reduction's output copied in), those that compute
// one loss with it, or those its module says are (Modules).
std::vector<int> replicas_of(const Stepped& st, const std::vector<int>& held, int32_t tensor, int32_t step,
                             const Observed& seen, Modules& modules) {
  const CapturedValue& v = *st.before.at(held.front());
  if (!v.uniform && v.elements > 0) return held;
  if (v.elements == 0) return {};
  const int r = held.front();
  RankMask evidence = modules.replicas(tensor, step, r);
  if (auto it = seen.params.find({r, tensor, step}); it != seen.params.end()) evidence |= it->second.same;
  // Ranks that compute one loss together (tensor parallelism) use one model: a parameter they
  // hold alike is one parameter, held whole by each.
  if (static_cast<size_t>(r) < seen.together.size()) evidence |= seen.together[static_cast<size_t>(r)];
  std::vector<int> out;
  for (int x : held) {
    if (evidence & rank_bit(x)) out.push_back(x);
  }
  return out;
}

// A divergence of one tensor at one step, if its replicas split after it or by the next step.
bool diverges(const Stepped& st, const Stepped* next, std::vector<int> replicas, Divergence& d) {
  if (replicas.size() < 2) return false;
  const ByRank after = only(st.after, replicas);
  d.replicas = replicas;
  d.source = st.source;
  if (classes(after).size() > 1) {
    const ByRank grads = only(st.grad, replicas);
    d.cause = classes(grads).size() > 1 ? Cause::gradient : Cause::update;
    d.apart = after;
    return true;
  }
  if (next == nullptr || after.size() != replicas.size()) return false;
  const ByRank later = only(next->before, replicas);
  if (classes(later).size() <= 1) return false;
  d.cause = Cause::between;
  d.apart = later;
  return true;
}

Steps stepped_values(const CapturedProgram& p, std::set<int32_t>& stepped) {
  Steps by;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    for (const CapturedValue& v : p.ranks[r].values) {
      if (v.of != Of::param && v.of != Of::grad) continue;
      Stepped& st = by[{v.tensor, v.step}];
      ByRank& into = v.of == Of::grad ? st.grad : (v.after ? st.after : st.before);
      into.emplace(static_cast<int>(r), &v);
      if (v.of == Of::param && !v.after) st.source = v.source;
      stepped.insert(v.tensor);
    }
  }
  return by;
}

std::vector<Divergence> divergences(const CapturedProgram& p, const Observed& seen,
                                    std::set<int32_t>& stepped) {
  const Steps by = stepped_values(p, stepped);
  Modules modules(p, by, seen);
  std::vector<Divergence> out;
  std::set<int32_t> done;
  for (const auto& [key, st] : by) {
    if (done.count(key.first)) continue;
    auto next = by.find({key.first, key.second + 1});
    for (const std::vector<int>& held : classes(st.before)) {
      Divergence d;
      const std::vector<int> replicas = replicas_of(st, held, key.first, key.second, seen, modules);
      if (!diverges(st, next == by.end() ? nullptr : &next->second, replicas, d)) continue;
      d.tensor = key.first;
      d.step = key.second;
      done.insert(key.first);
      out.push_back(std::move(d));
      break;
    }
  }
  return out;
}

// Whether two digests of one tensor differ by more than float rounding: sums that disagree
// beyond a millionth of the magnitudes they sum.
bool beyond_rounding(const CapturedValue& a, const CapturedValue& b) {
  if (std::isnan(a.sum) || std::isnan(b.sum)) return true;
  const double scale = std::max({a.abs_sum, b.abs_sum, 1e-30});
  return std::fabs(a.sum - b.sum) > 1e-6 * scale;
}

std::string cause_text(Cause c) {
  switch (c) {
    case Cause::gradient:
      return "their gradients differed across those ranks going into the step";
    case Cause::update:
      return "their gradients were the same there: the step itself differed";
    case Cause::between:
      return "something between that step and the next changed them on some of those ranks only";
    case Cause::unreduced:
      return "the step consumed gradients that no reduction over those ranks made";
    case Cause::changed:
      return "their gradients came out of a reduction over those ranks the same and were changed after it on "
             "each rank differently";
  }
  return "";
}

std::string fix_text(Cause c) {
  switch (c) {
    case Cause::gradient:
      return "Fix: reduce the gradient of every replicated parameter over all the ranks that hold a copy "
             "before optimizer.step() (all_reduce each p.grad and divide by the group size, or let DDP or "
             "FSDP "
             "reduce them); these were left out, or reduced over fewer ranks.";
    case Cause::update:
      return "Fix: make the step the same on every replica: the same learning rate, clipping and optimizer "
             "state on each rank.";
    case Cause::between:
      return "Fix: change a replicated parameter on every rank or on none, or broadcast it after the change.";
    case Cause::changed:
      return "Fix: change reduced gradients the same way on every rank that holds them: compute a clipping "
             "coefficient from the norm over every rank's parameters (all_reduce the squares over the group "
             "that holds the model's parts), or scale before the reduction.";
    case Cause::unreduced:
      return "Fix: reduce the gradient of every replicated parameter over all the ranks that hold a copy "
             "before optimizer.step() (all_reduce each p.grad over them and divide by their number, or "
             "leave it to DDP or FSDP).";
  }
  return "";
}

std::string split_text(const CapturedProgram& p, const Divergence& d) {
  std::string out = "  " + p.strings[static_cast<size_t>(d.tensor)] + ":";
  const std::vector<std::vector<int>> parts = classes(d.apart);
  for (size_t i = 0; i < parts.size() && i < 4; ++i) {
    out += (i ? "; ranks " : " ranks ") + ranks_text(parts[i]) + " sum " +
           number(d.apart.at(parts[i].front())->sum);
  }
  const CapturedValue& a = *d.apart.at(parts[0].front());
  const CapturedValue& b = *d.apart.at(parts[1].front());
  out += beyond_rounding(a, b) ? " (beyond rounding)" : " (equal up to rounding: the bytes differ)";
  return out + "\n";
}

// A divergence its gradients made (Cause::gradient) is a missing reduction when, on some replica,
// no reduction over all of them made the gradient its step took (and where every replica's
// gradient is known).
bool covers(const CapturedGroup& g, const std::vector<int>& ranks) {
  return std::includes(g.ranks.begin(), g.ranks.end(), ranks.begin(), ranks.end());
}

void classify(const CapturedProgram& p, const Observed& seen, Divergence& d) {
  if (d.cause != Cause::gradient) return;
  int32_t partial = -1;
  bool all_reduced = true;
  for (int r : d.replicas) {
    auto it = seen.grads.find({r, d.tensor, d.step});
    if (it == seen.grads.end()) return;  // where its bytes were is not known
    const int32_t mark = it->second.reduction;
    if (mark < 0) {
      all_reduced = false;
      continue;
    }
    const CapturedRecord& rec = p.ranks[static_cast<size_t>(r)].records[static_cast<size_t>(mark)];
    const int32_t g = p.ranks[static_cast<size_t>(r)].groups[static_cast<size_t>(rec.a)];
    if (partial < 0) partial = g;  // the first replica's, as the text names it
    all_reduced = all_reduced && covers(p.groups[static_cast<size_t>(g)], d.replicas);
  }
  if (all_reduced) {
    const int r0 = d.replicas.front();
    const ValueFact& f = seen.grads.at({r0, d.tensor, d.step});
    if (f.via >= 0) {
      d.changed = {r0, f.reduction, f.via};
      d.cause = Cause::changed;
    }
    return;
  }
  d.cause = Cause::unreduced;
  d.partial = partial;
  const int r0 = d.replicas.front();
  for (auto it = seen.grads.lower_bound({r0, INT32_MIN, INT32_MIN});
       it != seen.grads.end() && std::get<0>(it->first) == r0; ++it) {
    const int32_t mark = it->second.reduction;
    if (std::get<2>(it->first) != d.step || mark < 0) continue;
    const CapturedRecord& rec = p.ranks[static_cast<size_t>(r0)].records[static_cast<size_t>(mark)];
    if (covers(group_of(p, r0, rec), d.replicas)) {
      d.others = {r0, mark};
      return;
    }
  }
}

std::string unreduced_text(const CapturedProgram& p, const Divergence& d) {
  std::string e = "As the step took them, these gradients ";
  if (d.partial >= 0) {
    e += "were reduced over ranks " + ranks_text(p.groups[static_cast<size_t>(d.partial)].ranks) +
         " only, not over every rank that holds a copy";
  } else {
    e += "came from no reduction the capture saw: each rank's is a sum over its own data alone (still "
         "partial over ranks " +
         ranks_text(d.replicas) + ")";
  }
  e += ", and the parameter is replicated on ranks " + ranks_text(d.replicas) + ".\n";
  if (d.others.first >= 0) {
    const CapturedRecord& rec =
        p.ranks[static_cast<size_t>(d.others.first)].records[static_cast<size_t>(d.others.second)];
    e += "The other parameters' gradients there came from " + std::string(to_string(rec.coll)) + " at " +
         source_of(p, rec.source) + " over ranks " +
         ranks_text(
             p.groups[static_cast<size_t>(
                          p.ranks[static_cast<size_t>(d.others.first)].groups[static_cast<size_t>(rec.a)])]
                 .ranks) +
         ".\n";
  }
  return e;
}

Finding divergence_finding(const CapturedProgram& p, const std::vector<const Divergence*>& group,
                           const std::set<int32_t>& stepped) {
  const Divergence& d = *group.front();
  std::string names;
  std::set<int32_t> diverged;
  for (size_t i = 0; i < group.size(); ++i) {
    diverged.insert(group[i]->tensor);
    if (i < 3) names += (i ? ", " : "") + p.strings[static_cast<size_t>(group[i]->tensor)];
  }
  if (group.size() > 3) names += " and " + std::to_string(group.size() - 3) + " more";
  const std::string at = source_of(p, d.source);
  Finding f;
  f.kind = d.cause == Cause::unreduced ? FindingKind::missing_reduction : FindingKind::replica_divergence;
  const bool between = d.cause == Cause::between;
  f.summary = names + ": the same on ranks " + ranks_text(d.replicas) + (between ? " after " : " before ") +
              "the optimizer step at " + at + " (step " + std::to_string(d.step) + "), different " +
              (between ? "at the next" : "after it") + ": " + cause_text(d.cause);
  std::string e =
      f.summary + ".\nReplicas drift apart from here on, silently: each rank trains its own copy.\n";
  for (size_t i = 0; i < group.size() && i < 8; ++i) e += split_text(p, *group[i]);
  std::string kept;
  int n_kept = 0;
  for (int32_t t : stepped) {
    if (diverged.count(t)) continue;
    if (n_kept++ < 4) kept += (n_kept > 1 ? ", " : "") + p.strings[static_cast<size_t>(t)];
  }
  if (n_kept > 0) {
    e += "The other parameters stepped there stayed the same on those ranks (" + std::to_string(n_kept) +
         ": " + kept + (n_kept > 4 ? ", ..." : "") + ").\n";
  }
  if (d.cause == Cause::unreduced) e += unreduced_text(p, d);
  if (const auto& [r, red, via] = d.changed; r >= 0) {
    const CapturedRank& rank = p.ranks[static_cast<size_t>(r)];
    const CapturedRecord& reduction = rank.records[static_cast<size_t>(red)];
    e += "They came out of the " + std::string(to_string(reduction.coll)) + " at " +
         source_of(p, reduction.source) +
         " the same on every one of those ranks, and the last operator that changed them, " +
         p.strings[static_cast<size_t>(rank.records[static_cast<size_t>(via)].name)] + " at " +
         source_of(p, rank.records[static_cast<size_t>(via)].source) +
         ", made them differ (a clipping coefficient from a norm each rank computed over its own parameters "
         "alone, a "
         "rank-dependent scale).\n";
  }
  f.explanation = e + fix_text(d.cause);
  f.key = std::string(to_string(f.kind)) + " at " + at + " " + std::to_string(static_cast<int>(d.cause));
  ElementDetail detail;
  detail.step = d.step;
  detail.tensor = p.strings[static_cast<size_t>(d.tensor)];
  const std::vector<std::vector<int>> parts = classes(d.apart);
  detail.rank = parts[0].front();
  detail.other_rank = parts[1].front();
  detail.expected = d.apart.at(detail.rank)->sum;
  detail.actual = d.apart.at(detail.other_rank)->sum;
  detail.note = cause_text(d.cause);
  detail.source = line_of(p, d.source);
  f.detail = detail;
  for (const Divergence* g : group) {
    for (int r : g->replicas) {
      join_spread(f.spread, spread_of(p.strings[static_cast<size_t>(g->tensor)], r, {}));
    }
  }
  return f;
}

}  // namespace

void replica_findings(const CapturedProgram& p, const Observed& seen, std::vector<Finding>& out) {
  std::set<int32_t> stepped;
  std::vector<Divergence> found = divergences(p, seen, stepped);
  for (Divergence& d : found) classify(p, seen, d);
  std::map<std::pair<int32_t, int>, std::vector<const Divergence*>> sites;  // (line, cause)
  for (const Divergence& d : found) sites[{d.source, static_cast<int>(d.cause)}].push_back(&d);
  for (const auto& [site, group] : sites) out.push_back(divergence_finding(p, group, stepped));
}

}  // namespace shardcheck::core::values
