// The value checks of a captured program: replica_divergence, missing_reduction, double_reduction,
// grad_norm_miscount and divisor_mismatch from the ranks' digests (captured_values.hpp).
#include "core/scenario/captured_values.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace shardcheck::core {

namespace {

using Of = CapturedValue::Of;
using ByRank = std::map<int, const CapturedValue*>;

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

// The ranks of `m` grouped by equal digests, each group ascending, groups by their first rank.
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

// Whether two digests of one tensor differ by more than float rounding: sums that disagree
// beyond a millionth of the magnitudes they sum.
bool beyond_rounding(const CapturedValue& a, const CapturedValue& b) {
  if (std::isnan(a.sum) || std::isnan(b.sum)) return true;
  const double scale = std::max({a.abs_sum, b.abs_sum, 1e-30});
  return std::fabs(a.sum - b.sum) > 1e-6 * scale;
}

// -- reductions --------------------------------------------------------------------------------

// Where the bytes of a range came from: a sum or average over a group (a reduction's output),
// carried through the operators that read it (a copy, a division) to what they write.
struct Mark {
  int64_t offset = 0, bytes = 0;
  int32_t group = -1;
  int32_t record = -1;   // the reduction
  bool carried = false;  // through an operator (else the reduction's own output)
  int32_t via = -1;      // carried: the last operator it went through
};

class Provenance {
 public:
  // The mark of the reduction over `group` that bytes of `r` came from, or nullptr.
  const Mark* reduced(const CapturedRange& r, int32_t group) const {
    for (const Mark& m : marks(r.buf)) {
      if (m.group == group && overlaps(m, r)) return &m;
    }
    return nullptr;
  }
  // The reductions that bytes of `r` came from, by group.
  std::map<int32_t, Mark> origins(const CapturedRange& r) const {
    std::map<int32_t, Mark> out;
    for (const Mark& m : marks(r.buf)) {
      if (overlaps(m, r)) out.emplace(m.group, m);
    }
    return out;
  }
  void write(const CapturedRange& r, const Mark* from) {
    auto it = by_buf_.find(r.buf);
    if (it != by_buf_.end()) {
      std::erase_if(it->second, [&](const Mark& m) { return overlaps(m, r); });
    }
    if (from)
      by_buf_[r.buf].push_back({r.offset, r.bytes, from->group, from->record, from->carried, from->via});
  }
  // An operator: what it writes comes from a reduction when what it reads does.
  void op(const CapturedRank& rank, const CapturedRecord& rec) {
    const Mark* from = nullptr;
    for (uint32_t i = 0; i < rec.reads && !from; ++i) {
      const CapturedRange& r = rank.ranges[rec.first + i];
      for (const Mark& m : marks(r.buf)) {
        if (overlaps(m, r)) {
          from = &m;
          break;
        }
      }
    }
    Mark carried = from ? *from : Mark{};
    carried.carried = true;
    carried.via = static_cast<int32_t>(&rec - rank.records.data());
    for (uint32_t i = 0; i < rec.writes; ++i)
      write(rank.ranges[rec.first + rec.reads + i], from ? &carried : nullptr);
  }
  void free(int32_t buf) { by_buf_.erase(buf); }

 private:
  static bool overlaps(const Mark& m, const CapturedRange& r) {
    return m.offset < r.offset + r.bytes && r.offset < m.offset + m.bytes;
  }
  const std::vector<Mark>& marks(int32_t buf) const {
    static const std::vector<Mark> none;
    auto it = by_buf_.find(buf);
    return it == by_buf_.end() ? none : it->second;
  }
  std::map<int32_t, std::vector<Mark>> by_buf_;
};

// Follows one rank's records in order, marking what each sum or average over a group writes and
// carrying the marks through operators; `before(i)` sees the marks ahead of record i (and, last,
// with i the number of records, after them all).
template <class Before>
void walk_reductions(const CapturedRank& rank, Provenance& prov, Before&& before) {
  for (size_t i = 0; i < rank.records.size(); ++i) {
    before(i);
    const CapturedRecord& rec = rank.records[i];
    if (rec.kind == CapturedKind::op) prov.op(rank, rec);
    if (rec.kind == CapturedKind::free) prov.free(rec.a);
    if (rec.kind != CapturedKind::coll || rec.coll == CollectiveKind::barrier) continue;
    const bool reduces = rec.coll == CollectiveKind::all_reduce || rec.coll == CollectiveKind::reduce_scatter;
    const bool averages = reduces && (rec.reduce == ReduceOp::sum || rec.reduce == ReduceOp::avg);
    const Mark m{0, 0, rank.groups[static_cast<size_t>(rec.a)], static_cast<int32_t>(i)};
    for (uint32_t w = 0; w < rec.writes; ++w)  // its output, or a list form's parts
      prov.write(rank.ranges[rec.first + rec.reads + w], averages ? &m : nullptr);
  }
  before(rank.records.size());
}

// Where each gradient came from as its optimizer step took it: (rank, parameter, step) -> the
// reductions its bytes came from, by group (none: no reduction the capture saw).
using GradKey = std::tuple<int, int32_t, int32_t>;
using Origins = std::map<GradKey, std::map<int32_t, Mark>>;

Origins grad_origins(const CapturedProgram& p) {
  Origins out;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const CapturedRank& rank = p.ranks[r];
    std::vector<const CapturedValue*> grads;  // in file order, so by position
    for (const CapturedValue& v : rank.values) {
      if (v.of == Of::grad && v.range.buf >= 0) grads.push_back(&v);
    }
    size_t next = 0;
    Provenance prov;
    walk_reductions(rank, prov, [&](size_t i) {
      for (; next < grads.size() && static_cast<size_t>(grads[next]->position) <= i; ++next)
        out[{static_cast<int>(r), grads[next]->tensor, grads[next]->step}] = prov.origins(grads[next]->range);
    });
  }
  return out;
}

// Whether `group` holds every one of `ranks`.
bool covers(const CapturedProgram& p, int32_t group, const std::vector<int>& ranks) {
  const std::vector<int>& members = p.groups[static_cast<size_t>(group)].ranks;
  return std::includes(members.begin(), members.end(), ranks.begin(), ranks.end());
}
// -- replica_divergence ------------------------------------------------------------------------

// gradient: the gradients differed though a reduction over every replica made them; unreduced:
// they differed and none did (a missing reduction, its own kind).
enum class Cause { gradient, update, between, unreduced };

struct Divergence {
  int32_t tensor = 0;
  int32_t step = 0;
  int32_t source = -1;  // the optimizer step's line
  Cause cause = Cause::gradient;
  std::vector<int> replicas;               // the ranks that held one value
  ByRank apart;                            // what they held once it differed
  int32_t partial = -1;                    // unreduced: a group it was reduced over, short of the replicas
  std::pair<int, int32_t> others{-1, -1};  // unreduced: (rank, record) reducing other parameters
};

struct Stepped {
  ByRank before, after, grad;
  int32_t source = -1;
};

// A divergence of one tensor at one step, if its replicas (ranks that held one value, not a
// repeated one, before the step) split after it or by the next step.
bool diverges(const Stepped& st, const Stepped* next, Divergence& d) {
  for (const std::vector<int>& replicas : classes(st.before)) {
    const CapturedValue& held = *st.before.at(replicas.front());
    if (replicas.size() < 2 || held.uniform || held.elements == 0) continue;
    const ByRank after = only(st.after, replicas);
    d.replicas = replicas;
    d.source = st.source;
    if (classes(after).size() > 1) {
      const ByRank grads = only(st.grad, replicas);
      d.cause = classes(grads).size() > 1 ? Cause::gradient : Cause::update;
      d.apart = after;
      return true;
    }
    if (next == nullptr || after.size() != replicas.size()) continue;
    const ByRank later = only(next->before, replicas);
    if (classes(later).size() > 1) {
      d.cause = Cause::between;
      d.apart = later;
      return true;
    }
  }
  return false;
}

std::vector<Divergence> divergences(const CapturedProgram& p, std::set<int32_t>& stepped) {
  std::map<std::pair<int32_t, int32_t>, Stepped> by;  // (tensor, step)
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    for (const CapturedValue& v : p.ranks[r].values) {
      if (v.of == Of::coll_in || v.of == Of::coll_out) continue;
      Stepped& st = by[{v.tensor, v.step}];
      ByRank& into = v.of == Of::grad ? st.grad : (v.after ? st.after : st.before);
      into.emplace(static_cast<int>(r), &v);
      if (v.of == Of::param && !v.after) st.source = v.source;
      stepped.insert(v.tensor);
    }
  }
  std::vector<Divergence> out;
  std::set<int32_t> done;
  for (const auto& [key, st] : by) {
    if (done.count(key.first)) continue;
    auto next = by.find({key.first, key.second + 1});
    Divergence d;
    if (!diverges(st, next == by.end() ? nullptr : &next->second, d)) continue;
    d.tensor = key.first;
    d.step = key.second;
    done.insert(key.first);
    out.push_back(std::move(d));
  }
  return out;
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
void classify(const CapturedProgram& p, const Origins& origins, Divergence& d) {
  if (d.cause != Cause::gradient) return;
  int32_t partial = -1;
  bool all_reduced = true;
  for (int r : d.replicas) {
    auto it = origins.find({r, d.tensor, d.step});
    if (it == origins.end()) return;  // where its bytes were is not known
    bool reduced = false;
    for (const auto& [group, m] : it->second) {
      reduced = reduced || covers(p, group, d.replicas);
      if (partial < 0) partial = group;  // the first replica's, as the text names it
    }
    all_reduced = all_reduced && reduced;
  }
  if (all_reduced) return;
  d.cause = Cause::unreduced;
  d.partial = partial;
  const int r0 = d.replicas.front();
  for (auto it = origins.lower_bound({r0, INT32_MIN, INT32_MIN});
       it != origins.end() && std::get<0>(it->first) == r0; ++it) {
    if (std::get<2>(it->first) != d.step) continue;
    for (const auto& [group, m] : it->second) {
      if (covers(p, group, d.replicas)) {
        d.others = {r0, m.record};
        return;
      }
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

void replica_findings(const CapturedProgram& p, const Origins& origins, std::vector<Finding>& out) {
  std::set<int32_t> stepped;
  std::vector<Divergence> found = divergences(p, stepped);
  for (Divergence& d : found) classify(p, origins, d);
  std::map<std::pair<int32_t, int>, std::vector<const Divergence*>> sites;  // (line, cause)
  for (const Divergence& d : found) sites[{d.source, static_cast<int>(d.cause)}].push_back(&d);
  for (const auto& [site, group] : sites) out.push_back(divergence_finding(p, group, stepped));
}

// -- double_reduction --------------------------------------------------------------------------

struct Reduction {
  // rank -> its collective, its input's digest, and the earlier reduction its input came from
  struct Rank {
    const CapturedRecord* rec = nullptr;
    const CapturedValue* input = nullptr;
    int32_t from = -1;
  };
  std::map<int, Rank> ranks;
};

bool sums(const CapturedRecord& rec) {
  return (rec.coll == CollectiveKind::all_reduce || rec.coll == CollectiveKind::reduce_scatter ||
          rec.coll == CollectiveKind::reduce) &&
         rec.reduce == ReduceOp::sum;
}

// The reduction an input came from, or -1: its mark's, unless that is the reduction's own
// output and held something else than the input does (written since by something the capture
// does not see, such as a copy DDP makes in C++).
int32_t came_from(const Mark* m, const CapturedValue& input,
                  const std::map<int32_t, const CapturedValue*>& outputs) {
  if (m == nullptr) return -1;
  if (!m->carried) {
    auto it = outputs.find(m->record);
    // Comparable where the input is the whole output (a slice of it hashes otherwise).
    if (it != outputs.end() && it->second->elements == input.elements && it->second->hash != input.hash)
      return -1;
  }
  return m->record;
}

// One rank's collectives with an input digest, by (group, k-th collective on the group), with
// the provenance of their inputs.
void rank_reductions(const CapturedRank& rank, int r, std::map<std::pair<int32_t, int64_t>, Reduction>& out) {
  std::map<int32_t, const CapturedValue*> inputs, outputs;  // record index -> digest
  for (const CapturedValue& v : rank.values) {
    if (v.of == Of::coll_in) inputs[v.record] = &v;
    if (v.of == Of::coll_out) outputs[v.record] = &v;
  }
  std::set<int32_t> steps;  // where optimizer steps took the parameters
  for (const CapturedValue& v : rank.values) {
    if (v.of == Of::param && !v.after) steps.insert(v.position);
  }
  Provenance prov;
  std::map<int32_t, int64_t> k;  // group -> collectives so far
  walk_reductions(rank, prov, [&](size_t i) {
    if (i == rank.records.size()) return;
    const CapturedRecord& rec = rank.records[i];
    if (rec.kind != CapturedKind::coll || rec.coll == CollectiveKind::barrier) return;
    const int32_t group = rank.groups[static_cast<size_t>(rec.a)];
    const int64_t kth = k[group]++;
    auto it = inputs.find(static_cast<int32_t>(i));
    if (it == inputs.end()) return;
    int32_t from = came_from(prov.reduced(rank.ranges[rec.first], group), *it->second, outputs);
    // A gradient is reduced twice within one step: a buffer summed again at a later step holds
    // that step's gradients (copied in where the capture may not see, as DDP's bucket is).
    if (auto s = steps.upper_bound(from); from >= 0 && s != steps.end() && *s <= static_cast<int32_t>(i))
      from = -1;
    out[{group, kth}].ranks[r] = {&rec, it->second, from};
  });
}

// A sum over the group of an input that is the same on every member (not one repeated value)
// and came, on some member, from an earlier reduction over the same group: that reduction's
// record on that rank (its index), or -1 with `rank` unset.
int32_t doubled(const CapturedProgram& p, int32_t group, const Reduction& red, int& rank) {
  const std::vector<int>& members = p.groups[static_cast<size_t>(group)].ranks;
  if (members.size() < 2 || red.ranks.size() != members.size()) return -1;
  const Reduction::Rank& first = red.ranks.begin()->second;
  if (!sums(*first.rec) || first.input->uniform || first.input->elements < 2) return -1;
  for (const auto& [r, x] : red.ranks) {
    if (x.rec->coll != first.rec->coll || !sums(*x.rec) || x.input->hash != first.input->hash) return -1;
  }
  for (const auto& [r, x] : red.ranks) {
    if (x.from >= 0) {
      rank = r;
      return x.from;
    }
  }
  return -1;
}

Finding double_finding(const CapturedProgram& p, int32_t group, const Reduction& red, int rank,
                       int32_t from) {
  const CapturedGroup& g = p.groups[static_cast<size_t>(group)];
  const CapturedRecord& rec = *red.ranks.begin()->second.rec;
  const CapturedValue& v = *red.ranks.begin()->second.input;
  const CapturedRecord& earlier = p.ranks[static_cast<size_t>(rank)].records[static_cast<size_t>(from)];
  const std::string op(to_string(rec.coll));
  const std::string at = source_of(p, rec.source);
  const std::string times = std::to_string(g.ranks.size());
  const std::string name = p.strings[static_cast<size_t>(rec.name)];
  Finding f;
  f.kind = FindingKind::double_reduction;
  f.summary = op + " (sum) at " + at + " over ranks " + ranks_text(g.ranks) + " sums what " +
              std::string(to_string(earlier.coll)) + " at " + source_of(p, earlier.source) +
              " already reduced over them: the result is " + times + " times it";
  f.explanation =
      f.summary + ".\nThe input of " + op + (name.empty() ? "" : " '" + name + "'") + " at " + at +
      " comes from the " + std::string(to_string(earlier.coll)) + " at " + source_of(p, earlier.source) +
      " over the same ranks, and held the same " + std::to_string(v.elements) +
      " elements on every one of them, bit for bit. Summing it over " + times + " ranks gives " + times +
      " times it: a gradient reduced twice, as when DDP (or a gradient hook) has averaged it and the "
      "program sums it again (pytorch #160285).\nFix: reduce it once: leave the reduction to DDP or "
      "FSDP, or take these parameters out of theirs (DDP's _set_params_and_buffers_to_ignore_for_model) "
      "and reduce them yourself.";
  f.key = "double_reduction at " + at;
  ElementDetail detail;
  detail.tensor = name;
  detail.rank = g.ranks[0];
  detail.other_rank = g.ranks[1];
  detail.expected = v.sum;
  detail.actual = v.sum * static_cast<double>(g.ranks.size());
  detail.note = "summed " + times + " identical copies of a reduced value";
  detail.source = line_of(p, rec.source);
  f.detail = detail;
  return f;
}

void double_findings(const CapturedProgram& p, std::vector<Finding>& out) {
  std::map<std::pair<int32_t, int64_t>, Reduction> all;
  for (size_t r = 0; r < p.ranks.size(); ++r) rank_reductions(p.ranks[r], static_cast<int>(r), all);
  for (const auto& [key, red] : all) {
    int rank = -1;
    const int32_t from = doubled(p, key.first, red, rank);
    if (from < 0) continue;
    Finding f = double_finding(p, key.first, red, rank, from);
    for (const auto& [r, x] : red.ranks) {
      join_spread(f.spread, spread_of(std::to_string(key.first) + ":" + std::to_string(key.second), r, {}));
    }
    add_finding(out, std::move(f));
  }
}

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

// -- divisor_mismatch --------------------------------------------------------------------------

// The whole number a reduction's output was divided by to give `grad` (from their absolute sums,
// which a division scales exactly up to rounding), or 0 when it is none.
int64_t divisor(const CapturedValue& out, const CapturedValue& grad) {
  if (out.elements != grad.elements || out.uniform || !(grad.abs_sum > 0) || !std::isfinite(out.abs_sum))
    return 0;
  const double k = out.abs_sum / grad.abs_sum;
  const double whole = std::round(k);
  return whole >= 2 && whole < 1e6 && std::fabs(k - whole) <= 1e-4 * whole ? static_cast<int64_t>(whole) : 0;
}

// "a/b" in lowest terms, or "a" where b divides it.
std::string fraction(int64_t a, int64_t b) {
  const int64_t d = std::gcd(a, b);
  return b / d == 1 ? std::to_string(a / d) : std::to_string(a / d) + "/" + std::to_string(b / d);
}

// A group of rank `r` with `size` members (the first by index), else -1.
int32_t group_of_size(const CapturedProgram& p, int r, int64_t size) {
  for (int32_t g : p.ranks[static_cast<size_t>(r)].groups) {
    const std::vector<int>& members = p.groups[static_cast<size_t>(g)].ranks;
    if (static_cast<int64_t>(members.size()) == size && std::binary_search(members.begin(), members.end(), r))
      return g;
  }
  return -1;
}

struct Scaled {
  int rank = 0;
  int32_t tensor = 0, step = 0, group = 0, other = 0;
  Mark mark;
  int64_t divisor = 0;
  const CapturedValue* out = nullptr;
  const CapturedValue* grad = nullptr;
};

// The gradients a rank divided by the size of another group than the one that summed them.
void rank_scaled(const CapturedProgram& p, const Origins& origins, int r, std::vector<Scaled>& found) {
  const CapturedRank& rank = p.ranks[static_cast<size_t>(r)];
  std::map<int32_t, const CapturedValue*> outputs;  // record index -> digest
  for (const CapturedValue& v : rank.values) {
    if (v.of == Of::coll_out) outputs[v.record] = &v;
  }
  for (const CapturedValue& v : rank.values) {
    if (v.of != Of::grad) continue;
    auto it = origins.find({r, v.tensor, v.step});
    if (it == origins.end() || it->second.size() != 1 || !it->second.begin()->second.carried) continue;
    const auto& [group, mark] = *it->second.begin();
    auto out = outputs.find(mark.record);
    if (out == outputs.end()) continue;
    const int64_t k = divisor(*out->second, v);
    const CapturedRecord& rec = rank.records[static_cast<size_t>(mark.record)];
    const int64_t n = static_cast<int64_t>(p.groups[static_cast<size_t>(group)].ranks.size());
    // Only a divisor larger than the ranks that contributed: a smaller one is also what a
    // reduction divided in two parts does (FSDP2 divides before its reduce-scatter and after it).
    if (k <= (rec.reduce == ReduceOp::avg ? 1 : n)) continue;
    const int32_t other = group_of_size(p, r, k);
    if (other >= 0) found.push_back({r, v.tensor, v.step, group, other, mark, k, out->second, &v});
  }
}

Finding divisor_finding(const CapturedProgram& p, const std::vector<const Scaled*>& site) {
  const Scaled& s = *site.front();
  const CapturedRank& rank = p.ranks[static_cast<size_t>(s.rank)];
  const CapturedRecord& red = rank.records[static_cast<size_t>(s.mark.record)];
  const CapturedRecord& div = rank.records[static_cast<size_t>(s.mark.via)];
  const CapturedGroup& g = p.groups[static_cast<size_t>(s.group)];
  const CapturedGroup& o = p.groups[static_cast<size_t>(s.other)];
  const std::string n = std::to_string(g.ranks.size()), k = std::to_string(s.divisor);
  const bool avg = red.reduce == ReduceOp::avg;
  std::set<int32_t> tensors;
  for (const Scaled* x : site) tensors.insert(x->tensor);
  std::string names;
  for (int32_t t : tensors) names += (names.empty() ? "'" : ", '") + p.strings[static_cast<size_t>(t)] + "'";
  Finding f;
  f.kind = FindingKind::divisor_mismatch;
  f.summary = std::string(to_string(red.coll)) + " (" + (avg ? "avg" : "sum") + ") at " +
              source_of(p, red.source) + " over ranks " + ranks_text(g.ranks) + ", then divided by " + k +
              " at " + source_of(p, div.source) + ": " + k + " is the size of " +
              (o.name.empty() ? "another group" : "group '" + o.name + "'") + " (ranks " +
              ranks_text(o.ranks) + "), not " +
              (avg ? "1 (it is an average already)" : n + ", the ranks that summed");
  f.explanation = f.summary + ".\nThe gradients of " + names + " as the optimizer step at " +
                  source_of(p, s.grad->source) + " took them are the reduction's output divided by " + k +
                  ", so they are " + fraction(avg ? 1 : static_cast<int64_t>(g.ranks.size()), s.divisor) +
                  " times the average over the ranks that contributed: a divisor meant for another group, as "
                  "when expert gradients are reduced over their expert-data-parallel group and divided by "
                  "the data-parallel size, or the reverse.\n  rank " +
                  std::to_string(s.rank) + ", step " + std::to_string(s.step) + ": reduced sum " +
                  number(s.out->sum) + ", gradient " + number(s.grad->sum) +
                  "\nFix: divide by the size of the group that reduced it (dist.get_world_size(group) of "
                  "that all_reduce), or reduce over the group whose size you divide by.";
  f.key = "divisor_mismatch at " + source_of(p, div.source) + " " + source_of(p, red.source);
  ElementDetail detail;
  detail.step = s.step;
  detail.tensor = p.strings[static_cast<size_t>(s.tensor)];
  detail.rank = detail.other_rank = s.rank;
  detail.expected = avg ? s.out->sum : s.out->sum / static_cast<double>(g.ranks.size());
  detail.actual = s.grad->sum;
  detail.note = "divided by " + k + " where " + (avg ? "1" : n) + " was due";
  detail.source = line_of(p, div.source);
  f.detail = detail;
  for (const Scaled* x : site)
    join_spread(f.spread, spread_of(p.strings[static_cast<size_t>(x->tensor)], x->rank, {}));
  return f;
}

void divisor_findings(const CapturedProgram& p, const Origins& origins, std::vector<Finding>& out) {
  std::vector<Scaled> found;
  for (size_t r = 0; r < p.ranks.size(); ++r) rank_scaled(p, origins, static_cast<int>(r), found);
  std::map<std::pair<int32_t, int32_t>, std::vector<const Scaled*>> sites;  // (division, reduction) lines
  for (const Scaled& s : found) {
    const CapturedRank& rank = p.ranks[static_cast<size_t>(s.rank)];
    sites[{rank.records[static_cast<size_t>(s.mark.via)].source,
           rank.records[static_cast<size_t>(s.mark.record)].source}]
        .push_back(&s);
  }
  for (const auto& [key, site] : sites) add_finding(out, divisor_finding(p, site));
}

}  // namespace

std::vector<Finding> check_captured_values(const CapturedProgram& program) {
  std::vector<Finding> out;
  const Origins origins = grad_origins(program);
  replica_findings(program, origins, out);
  double_findings(program, out);
  norm_findings(program, out);
  divisor_findings(program, origins, out);
  return out;
}

}  // namespace shardcheck::core
