// What the bytes of a captured program carry, walked in lockstep across ranks (value_flow.hpp).
#include "core/scenario/value_flow.hpp"

#include <algorithm>
#include <bit>
#include <string>
#include <tuple>
#include <utility>

#include "core/scenario/captured_ops.hpp"

namespace shardcheck::core {

std::vector<int> ranks_of(RankMask m) {
  std::vector<int> out;
  for (int r = 0; m != 0; ++r, m >>= 1) {
    if (m & 1) out.push_back(r);
  }
  return out;
}

namespace {

using Piece = RankFlow::Piece;

RankMask all_ranks(int world) { return world >= 64 ? ~RankMask{0} : (RankMask{1} << world) - 1; }

Weight merged(const Weight& a, const Weight& b) {
  if (!a.known() || !b.known()) return Weight::unknown();
  return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
}

Weight scaled(const Weight& w, double c) {
  if (!w.known() || std::isnan(c)) return Weight::unknown();
  const double a = w.lo * c, b = w.hi * c;
  return {std::min(a, b), std::max(a, b)};
}

// Two facts of one element's contributions, as a sum or a gather combines them: the terms of
// both, the weights of both; "same" and the reduction mark are the caller's to set.
ValueFact combined(const ValueFact& a, const ValueFact& b) {
  ValueFact out;
  out.terms = a.terms | b.terms;
  out.same = a.same & b.same;
  out.weight = merged(a.weight, b.weight);
  out.scaled_at = a.scaled_at == b.scaled_at ? a.scaled_at : -1;
  return out;
}

// The pieces of several ranges of one length, cut where any of them is cut, each piece the
// combination of what every range holds there.
std::vector<Piece> elementwise(const std::vector<const std::vector<Piece>*>& inputs, int64_t length) {
  std::vector<int64_t> cuts{0, length};
  for (const auto* in : inputs) {
    for (const Piece& p : *in) {
      if (p.lo > 0 && p.lo < length) cuts.push_back(p.lo);
      if (p.hi > 0 && p.hi < length) cuts.push_back(p.hi);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<Piece> out;
  std::vector<size_t> at(inputs.size(), 0);
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    Piece piece{cuts[c], cuts[c + 1], {}};
    bool first = true;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::vector<Piece>& in = *inputs[i];
      while (at[i] < in.size() && in[at[i]].hi <= piece.lo) ++at[i];
      if (at[i] >= in.size() || in[at[i]].lo > piece.lo) continue;
      piece.fact = first ? in[at[i]].fact : combined(piece.fact, in[at[i]].fact);
      first = false;
    }
    out.push_back(piece);
  }
  return out;
}

// The part [lo, hi) of `pieces`, shifted to start at 0.
std::vector<Piece> slice(const std::vector<Piece>& pieces, int64_t lo, int64_t hi) {
  std::vector<Piece> out;
  for (const Piece& p : pieces) {
    const int64_t a = std::max(p.lo, lo), b = std::min(p.hi, hi);
    if (a < b) out.push_back({a - lo, b - lo, p.fact});
  }
  return out;
}

// The reduction the bytes of `pieces` came out of, where they all did (-1 otherwise).
int32_t origin_of(const std::vector<Piece>& pieces) {
  int32_t out = -2;
  for (const Piece& p : pieces) {
    const int32_t o = p.fact.reduction >= 0 ? p.fact.reduction : p.fact.origin;
    out = out == -2 || out == o ? o : -1;
  }
  return out < 0 ? -1 : out;
}

std::vector<Piece> shifted(std::vector<Piece> pieces, int64_t by) {
  for (Piece& p : pieces) {
    p.lo += by;
    p.hi += by;
  }
  return pieces;
}

double scale_of(const CapturedRank& r, size_t index) {
  auto it = std::lower_bound(r.scales.begin(), r.scales.end(),
                             std::pair<int32_t, double>{static_cast<int32_t>(index), -HUGE_VAL});
  return it != r.scales.end() && it->first == static_cast<int32_t>(index)
             ? it->second
             : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

// -- one rank ----------------------------------------------------------------------------------

RankFlow::RankFlow(const CapturedProgram& p, int rank)
    : p_(p), r_(p.ranks[static_cast<size_t>(rank)]), rank_(rank) {
  for (const CapturedRank::Pre& pre : r_.pre) pre_.insert(pre.buf);
  for (const CapturedValue& v : r_.values) {
    if (v.of == CapturedValue::Of::param && v.range.buf >= 0) params_.insert(v.range.buf);
    if (v.of == CapturedValue::Of::param && !v.after) steps_.push_back(v.position);
  }
  std::sort(steps_.begin(), steps_.end());
  steps_.erase(std::unique(steps_.begin(), steps_.end()), steps_.end());
}

int32_t RankFlow::steps_before(size_t i) const {
  return static_cast<int32_t>(std::upper_bound(steps_.begin(), steps_.end(), static_cast<int32_t>(i)) -
                              steps_.begin());
}

// Bytes nothing has written since the walk began: a parameter carries no rank's data; a buffer
// from before the capture that is not one (an input made earlier) carries its rank's.
ValueFact RankFlow::fallback(int32_t buf) const {
  ValueFact f;
  f.same = rank_bit(rank_);
  if (!params_.count(buf) && pre_.count(buf)) f.terms = rank_bit(rank_);
  return f;
}

std::vector<Piece> RankFlow::pieces(const CapturedRange& r) const {
  std::vector<Piece> out;
  const int64_t end = r.offset + r.bytes;
  int64_t at = r.offset;
  auto it = spans_.find(r.buf);
  if (it != spans_.end()) {
    const std::vector<Span>& spans = it->second;
    auto s = std::upper_bound(spans.begin(), spans.end(), r.offset,
                              [](int64_t x, const Span& sp) { return x < sp.hi; });
    for (; s != spans.end() && s->lo < end; ++s) {
      if (s->lo > at) out.push_back({at - r.offset, s->lo - r.offset, fallback(r.buf)});
      const int64_t a = std::max(s->lo, at), b = std::min(s->hi, end);
      out.push_back({a - r.offset, b - r.offset, s->fact});
      at = b;
    }
  }
  if (at < end) out.push_back({at - r.offset, end - r.offset, fallback(r.buf)});
  return out;
}

ValueFact RankFlow::read(const CapturedRange& r) const {
  const std::vector<Piece> parts = pieces(r);
  if (parts.empty()) return fallback(r.buf);
  ValueFact out = parts.front().fact;
  for (size_t i = 1; i < parts.size(); ++i) {
    const ValueFact& f = parts[i].fact;
    const bool same_mark = f.reduction == out.reduction;
    ValueFact c = combined(out, f);
    if (same_mark) {
      c.reduction = out.reduction;
      c.via = out.via;
      c.step = out.step;
      c.post = out.post == f.post ? out.post : std::numeric_limits<double>::quiet_NaN();
      c.at_reduction =
          out.at_reduction == f.at_reduction ? out.at_reduction : std::numeric_limits<double>::quiet_NaN();
    }
    out = c;
  }
  return out;
}

void RankFlow::write(const CapturedRange& r, const ValueFact& f) {
  if (r.bytes <= 0) return;
  std::vector<Span>& spans = spans_[r.buf];
  const int64_t lo = r.offset, hi = r.offset + r.bytes;
  auto first =
      std::upper_bound(spans.begin(), spans.end(), lo, [](int64_t x, const Span& s) { return x < s.hi; });
  auto last = first;
  while (last != spans.end() && last->lo < hi) ++last;
  std::vector<Span> keep;
  if (first != last) {
    if (first->lo < lo) keep.push_back({first->lo, lo, first->fact});
    const Span& back = *(last - 1);
    if (back.hi > hi) keep.push_back({hi, back.hi, back.fact});
  }
  ValueFact put = f;
  if (params_.count(r.buf)) {  // a parameter is the model's state, not data: what the step wrote
    put.terms = 0;
    put.reduction = -1;
  }
  keep.insert(keep.begin() + (keep.empty() || keep.front().lo > lo ? 0 : 1), Span{lo, hi, put});
  const auto at = spans.erase(first, last);
  spans.insert(at, keep.begin(), keep.end());
}

// A collective's input or output: its one range, or a list form's range per member, one after
// the other.
int64_t RankFlow::coll_bytes(const CapturedRecord& rec, bool input) const {
  int64_t n = 0;
  const uint32_t from = input ? 0 : rec.reads, count = input ? rec.reads : rec.writes;
  for (uint32_t i = 0; i < count; ++i) n += r_.ranges[rec.first + from + i].bytes;
  return n;
}

std::vector<Piece> RankFlow::coll_input(const CapturedRecord& rec) const {
  std::vector<Piece> out;
  int64_t at = 0;
  for (uint32_t i = 0; i < rec.reads; ++i) {
    const CapturedRange& r = r_.ranges[rec.first + i];
    for (Piece& p : pieces(r)) out.push_back({p.lo + at, p.hi + at, p.fact});
    at += r.bytes;
  }
  return out;
}

void RankFlow::coll_output(const CapturedRecord& rec, const std::vector<Piece>& pieces) {
  int64_t at = 0;
  for (uint32_t i = 0; i < rec.writes; ++i) {
    const CapturedRange& r = r_.ranges[rec.first + rec.reads + i];
    write_pieces(r, slice(pieces, at, at + r.bytes));
    at += r.bytes;
  }
}

ValueFact RankFlow::read_input(const CapturedRecord& rec) const {
  ValueFact out = rec.reads > 0 ? read(r_.ranges[rec.first]) : fallback(-1);
  for (uint32_t i = 1; i < rec.reads; ++i) {
    const ValueFact f = read(r_.ranges[rec.first + i]);
    const int32_t mark = out.reduction == f.reduction ? out.reduction : -1;
    out = combined(out, f);
    out.reduction = mark;
  }
  return out;
}

void RankFlow::write_pieces(const CapturedRange& r, const std::vector<Piece>& pieces) {
  for (const Piece& p : pieces) {
    const int64_t lo = std::min(p.lo, r.bytes), hi = std::min(p.hi, r.bytes);
    if (lo < hi) write({r.offset + lo, hi - lo, r.buf}, p.fact);
  }
}

// An operator: each write is made from the reads it pairs with (all of them, or for a _foreach_
// operator the i-th tensor of each list and any tensor given once for all).
void RankFlow::op(const CapturedRecord& rec, size_t index) {
  // The capture's mark that a collective's inputs were filled where no operator shows (torch 1.x's
  // C++ callers): it says when bytes were written, not what they hold.
  if (p_.strings[static_cast<size_t>(rec.name)].ends_with("inputs (filled on the host)")) return;
  std::vector<Operand> in;
  in.reserve(rec.reads);
  for (uint32_t i = 0; i < rec.reads; ++i) {
    const CapturedRange& r = r_.ranges[rec.first + i];
    in.push_back({r.bytes, read(r)});
  }
  const std::string_view name = p_.strings[static_cast<size_t>(rec.name)];
  const double scale = scale_of(r_, index);
  const uint32_t writes = rec.writes;
  const bool paired = is_foreach_op(name) && writes > 0 && rec.reads >= writes;
  for (uint32_t w = 0; w < writes; ++w) {
    const CapturedRange& out = r_.ranges[rec.first + rec.reads + w];
    if (!paired) {
      write(out, made(name, index, out, in, scale));
      continue;
    }
    std::vector<Operand> mine;
    for (uint32_t i = w; i < rec.reads; i += writes) mine.push_back(in[i]);
    if (rec.reads % writes != 0) mine.push_back(in.back());  // a tensor given once for all (a number)
    write(out, made(name, index, out, mine, scale));
  }
  fresh_.clear();
}

namespace {

// The operands an elementwise operator lines up with its output (those of its size), and whether
// a one-element tensor beside them is broadcast over it (a number the capture does not know);
// `ok` is false where an operand of another size makes it no elementwise operator.
struct Lined {
  std::vector<const ValueFact*> facts;
  bool tiny = false;
  bool ok = true;
};

Lined lined_up(const std::vector<RankFlow::Operand>& in, int64_t bytes) {
  Lined l;
  for (const RankFlow::Operand& x : in) {
    if (x.bytes == bytes) {
      l.facts.push_back(&x.fact);
    } else if (x.bytes <= 8 && bytes > x.bytes) {
      l.tiny = true;
    } else {
      l.ok = false;
    }
  }
  l.ok = l.ok && !l.facts.empty();
  return l;
}

}  // namespace

// What an operator writes to `out`: the terms of all it read; the same value on the ranks where
// all it read was; the weights and the reduction mark of what it carries (a copy, a scaling, a
// sum of operands), or a new computation's (weight 1, no mark).
ValueFact RankFlow::made(std::string_view name, size_t index, const CapturedRange& out,
                         const std::vector<Operand>& in, double scale) const {
  ValueFact f;
  f.same = in.empty() ? (is_constant_fill_op(name) ? all_ranks(p_.world_size) : 0) : ~RankMask{0};
  f.terms = in.empty() ? rank_bit(rank_) : 0;
  for (const Operand& x : in) {
    f.terms |= x.fact.terms;
    f.same &= x.fact.same;
  }
  f.same |= rank_bit(rank_);
  for (const Operand& x : in) {
    if (f.origin < 0) f.origin = x.fact.reduction >= 0 ? x.fact.reduction : x.fact.origin;
  }
  const bool copy = is_copy_op(name) && in.size() == 1;
  const Lined l = copy ? Lined{{&in.front().fact}, false, true} : lined_up(in, out.bytes);
  if (!copy && !(l.ok && (is_elementwise_op(name) || is_foreach_op(name)))) return f;
  int32_t mark = l.facts.front()->reduction;
  for (const ValueFact* x : l.facts) mark = x->reduction == mark ? mark : -1;
  const bool scaling = is_scaling_op(name) && l.facts.size() == 1;
  const double c = l.tiny ? std::numeric_limits<double>::quiet_NaN() : scale;
  if (copy) {
    f.weight = l.facts.front()->weight;
    f.scaled_at = l.facts.front()->scaled_at;
  } else if (scaling) {
    // A new tensor scaled inside autograd (a gradient made as `grad * c`) is a new computation;
    // a buffer scaled where it is, or anything a reduction made, is scaled.
    const bool fresh = fresh_.count(out.buf) && mark < 0;
    f.weight = fresh ? Weight{} : scaled(l.facts.front()->weight, c);
    f.scaled_at = fresh ? -1 : static_cast<int32_t>(index);
  } else if (is_additive_op(name) && !l.tiny) {
    f.weight = l.facts.front()->weight;
    f.scaled_at = l.facts.front()->scaled_at;
    for (size_t k = 1; k < l.facts.size(); ++k) {
      const bool last = k + 1 == l.facts.size();
      f.weight = merged(
          f.weight, last ? scaled(l.facts[k]->weight, std::isnan(scale) ? 1 : scale) : l.facts[k]->weight);
    }
  }
  if (mark < 0) return f;
  const ValueFact& from = *l.facts.front();
  f.doubled_at = from.doubled_at;
  f.doubled_from = from.doubled_from;
  f.copies = from.copies;
  f.reduction = mark;
  f.via = static_cast<int32_t>(index);
  f.step = from.step;
  f.at_reduction = from.at_reduction;
  f.post = copy ? from.post : scaling ? from.post * c : std::numeric_limits<double>::quiet_NaN();
  return f;
}

// -- the walk ----------------------------------------------------------------------------------

struct ValueFlow::Pending {
  std::vector<int> members;                // global ranks, ascending
  std::vector<int64_t> at;                 // member -> record index (-1: not arrived)
  std::vector<std::vector<Piece>> inputs;  // member -> its input's pieces
  std::vector<uint64_t> digests;           // member -> its input's digest (0: none, or one repeated value)
  int arrived = 0;
};

ValueFlow::ValueFlow(const CapturedProgram& p) : p_(p) {
  for (size_t r = 0; r < p.ranks.size(); ++r)
    flows_.push_back(std::make_unique<RankFlow>(p, static_cast<int>(r)));
  next_.assign(p.ranks.size(), 0);
  issued_.resize(p.ranks.size());
  input_digests_.resize(p.ranks.size());
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    for (const CapturedValue& v : p.ranks[r].values) {
      if (v.of == CapturedValue::Of::coll_in && v.elements > 0)
        input_digests_[r][v.record] = v.uniform ? 0 : v.hash;
    }
  }
}

ValueFlow::~ValueFlow() = default;

void ValueFlow::walk(FunctionRef<void(int, size_t, const RankFlow&)> at) {
  std::vector<bool> done(p_.ranks.size(), false);
  for (;;) {
    bool progressed = false;
    for (size_t r = 0; r < p_.ranks.size(); ++r) {
      if (done[r]) continue;
      progressed |= advance(static_cast<int>(r), at);
      if (next_[r] == p_.ranks[r].records.size()) {
        at(static_cast<int>(r), next_[r], *flows_[r]);
        done[r] = true;
        progressed = true;
      }
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) return;
    if (!progressed && !force_one()) return;
  }
}

// Issues rank `r`'s records until one waits for another rank; true when any was issued.
bool ValueFlow::advance(int r, FunctionRef<void(int, size_t, const RankFlow&)> at) {
  RankFlow& flow = *flows_[static_cast<size_t>(r)];
  const CapturedRank& rank = p_.ranks[static_cast<size_t>(r)];
  bool progressed = false;
  while (next_[static_cast<size_t>(r)] < rank.records.size()) {
    const size_t i = next_[static_cast<size_t>(r)];
    const CapturedRecord& rec = rank.records[i];
    if (rec.kind == CapturedKind::coll || rec.kind == CapturedKind::recv) {
      if (waiting_.count({r, i}) == 0) {
        at(r, i, flow);
        waiting_.insert({r, i});
        progressed = true;
        if (rec.kind == CapturedKind::coll) {
          if (!arrive(r, i)) return progressed;
        }
      }
      if (rec.kind == CapturedKind::recv && !receive(r, i)) return progressed;
      if (next_[static_cast<size_t>(r)] == i) return progressed;  // the collective has not completed
      continue;
    }
    at(r, i, flow);
    progressed = true;
    switch (rec.kind) {
      case CapturedKind::alloc:
        flow.fresh_.insert(rec.a);
        break;
      case CapturedKind::free:
        flow.spans_.erase(rec.a);
        break;
      case CapturedKind::op:
        flow.op(rec, i);
        break;
      case CapturedKind::send: {
        const int32_t g = rank.groups[static_cast<size_t>(rec.b)];
        sent_[{r, rec.a, g}].push_back(flow.pieces(rank.ranges[rec.first]));
        break;
      }
      default:
        break;
    }
    ++next_[static_cast<size_t>(r)];
  }
  return progressed;
}

// Rank `r` reaches its collective at record `index`; true when that completed it.
bool ValueFlow::arrive(int r, size_t index) {
  const CapturedRank& rank = p_.ranks[static_cast<size_t>(r)];
  const CapturedRecord& rec = rank.records[index];
  const int32_t g = rank.groups[static_cast<size_t>(rec.a)];
  const std::pair<int32_t, int64_t> key{g, issued_[static_cast<size_t>(r)][g]++};
  std::unique_ptr<Pending>& pend = pending_[key];
  if (!pend) {
    pend = std::make_unique<Pending>();
    pend->members = p_.groups[static_cast<size_t>(g)].ranks;
    pend->at.assign(pend->members.size(), -1);
    pend->inputs.resize(pend->members.size());
    pend->digests.assign(pend->members.size(), 0);
  }
  const auto m = std::lower_bound(pend->members.begin(), pend->members.end(), r) - pend->members.begin();
  pend->at[static_cast<size_t>(m)] = static_cast<int64_t>(index);
  if (auto d = input_digests_[static_cast<size_t>(r)].find(static_cast<int32_t>(index));
      d != input_digests_[static_cast<size_t>(r)].end())
    pend->digests[static_cast<size_t>(m)] = d->second;
  if (rec.coll != CollectiveKind::barrier)
    pend->inputs[static_cast<size_t>(m)] = flows_[static_cast<size_t>(r)]->coll_input(rec);
  if (++pend->arrived < static_cast<int>(pend->members.size())) return false;
  complete(key);
  return true;
}

bool ValueFlow::receive(int r, size_t index) {
  const CapturedRank& rank = p_.ranks[static_cast<size_t>(r)];
  const CapturedRecord& rec = rank.records[index];
  const std::tuple<int, int, int32_t> key{rec.a, r, rank.groups[static_cast<size_t>(rec.b)]};
  auto it = sent_.find(key);
  size_t& k = received_[key];
  if (it == sent_.end() || it->second.size() <= k) return false;
  std::vector<Piece> got = it->second[k++];
  for (Piece& piece : got) {  // the sender's copy: its marks name the sender's records
    piece.fact.same |= rank_bit(r);
    piece.fact.reduction = piece.fact.scaled_at = -1;
  }
  flows_[static_cast<size_t>(r)]->write_pieces(rank.ranges[rec.first], got);
  waiting_.erase({r, index});
  ++next_[static_cast<size_t>(r)];
  return true;
}

namespace {

// A sum's (or average's) output, as every member holds it: `same` the ranks that hold it, the
// weights scaled by 1/N for an average, and the mark of the reduction (unknown weights and no
// mark for a maximum, minimum or product). `copies`: the members passed in copies of one value
// (0: they did not), whose contributions the sum then counts that many times; `from`: the
// reduction those copies came out of.
void reduced(std::vector<Piece>& pieces, const CapturedRecord& rec, int32_t index, int32_t step,
             RankMask same, int members, int copies, int32_t from) {
  const bool sums = rec.reduce == ReduceOp::sum || rec.reduce == ReduceOp::avg;
  for (Piece& piece : pieces) {
    ValueFact& f = piece.fact;
    f.same = same;
    f.origin = sums ? index : -1;
    f.doubled_at = sums && copies > 1 ? index : -1;
    f.doubled_from = f.doubled_at >= 0 ? from : -1;
    f.copies = f.doubled_at >= 0 ? copies : 0;
    if (f.doubled_at >= 0) f.weight = scaled(f.weight, copies);
    if (rec.reduce == ReduceOp::avg) f.weight = scaled(f.weight, 1.0 / members);
    if (!sums) f.weight = Weight::unknown();
    f.reduction = sums ? index : -1;
    f.via = -1;
    f.step = step;
    f.post = 1;
    f.at_reduction = f.weight.single() ? f.weight.lo : std::numeric_limits<double>::quiet_NaN();
    f.scaled_at = -1;
  }
}

void unmarked(std::vector<Piece>& pieces, RankMask same) {
  for (Piece& piece : pieces) {
    piece.fact.same = same;
    piece.fact.reduction = piece.fact.scaled_at = piece.fact.origin = piece.fact.doubled_at = -1;
  }
}

}  // namespace

// What member `m` of a completed collective holds in its output (`bytes` of it): made from what
// the members that reached it passed in.
std::vector<Piece> ValueFlow::output(const Pending& pd, size_t m, const CapturedRecord& rec,
                                     int64_t bytes) const {
  const int n = static_cast<int>(pd.members.size());
  const int r = pd.members[m];
  RankMask group = 0;
  for (int x : pd.members) group |= rank_bit(x);
  const int64_t index = pd.at[m];
  const int32_t step = flows_[static_cast<size_t>(r)]->steps_before(static_cast<size_t>(index));
  std::vector<const std::vector<Piece>*> ins;
  for (size_t i = 0; i < pd.members.size(); ++i) {
    if (pd.at[i] >= 0) ins.push_back(&pd.inputs[i]);
  }
  std::vector<Piece> out;
  switch (rec.coll) {
    case CollectiveKind::all_reduce:
    case CollectiveKind::reduce:
      if (rec.coll == CollectiveKind::reduce && static_cast<size_t>(rec.b) != m) return {};
      out = elementwise(ins, bytes);
      reduced(out, rec, static_cast<int32_t>(index), step,
              rec.coll == CollectiveKind::reduce ? rank_bit(r) : group, n, copies_summed(pd),
              origin_of(pd.inputs[m]));
      return out;
    case CollectiveKind::reduce_scatter: {
      std::vector<std::vector<Piece>> chunks;
      for (const auto* in : ins)
        chunks.push_back(slice(*in, static_cast<int64_t>(m) * bytes, static_cast<int64_t>(m + 1) * bytes));
      std::vector<const std::vector<Piece>*> parts;
      for (const auto& c : chunks) parts.push_back(&c);
      out = elementwise(parts, bytes);
      reduced(out, rec, static_cast<int32_t>(index), step, rank_bit(r), n, copies_summed(pd),
              origin_of(pd.inputs[m]));
      return out;
    }
    case CollectiveKind::all_gather:
    case CollectiveKind::all_to_all: {
      const bool gather = rec.coll == CollectiveKind::all_gather;
      const int64_t chunk = gather ? bytes / n : bytes / n;
      for (size_t i = 0; i < pd.members.size(); ++i) {
        if (pd.at[i] < 0) continue;
        const std::vector<Piece> part = gather ? slice(pd.inputs[i], 0, chunk)
                                               : slice(pd.inputs[i], static_cast<int64_t>(m) * chunk,
                                                       static_cast<int64_t>(m + 1) * chunk);
        for (Piece& piece : shifted(part, static_cast<int64_t>(i) * chunk)) out.push_back(piece);
      }
      unmarked(out, gather ? group : rank_bit(r));
      return out;
    }
    case CollectiveKind::broadcast:
      if (static_cast<size_t>(rec.b) < pd.members.size() && pd.at[static_cast<size_t>(rec.b)] >= 0)
        out = pd.inputs[static_cast<size_t>(rec.b)];
      unmarked(out, group);
      return out;
    case CollectiveKind::barrier:
      return {};
  }
  return {};
}

// How many copies of one value the members of a sum passed in: every member, where they all
// passed the same bytes (their digests, or a collective's output every one of them holds) and
// those carry the same ranks' losses; 0 otherwise. Copies of data no loss reached (a count of
// ranks) are no value reduced twice.
int ValueFlow::copies_summed(const Pending& pd) const {
  const size_t n = pd.members.size();
  if (n < 2 || pd.arrived != static_cast<int>(n)) return 0;
  RankMask group = 0;
  for (int x : pd.members) group |= rank_bit(x);
  const bool digests = std::all_of(pd.digests.begin(), pd.digests.end(),
                                   [&](uint64_t h) { return h != 0 && h == pd.digests[0]; });
  RankMask terms = ~RankMask{0};
  bool held = true, same_terms = true;
  for (size_t m = 0; m < n; ++m) {
    if (pd.inputs[m].empty()) return 0;
    for (const Piece& piece : pd.inputs[m]) {
      held = held && (piece.fact.same & group) == group;
      if (terms == ~RankMask{0}) terms = piece.fact.terms;
      same_terms = same_terms && piece.fact.terms == terms;
    }
  }
  return (digests || held) && same_terms && terms != 0 ? static_cast<int>(n) : 0;
}

void ValueFlow::complete(std::pair<int32_t, int64_t> key) {
  auto node = pending_.extract(key);
  const Pending& pd = *node.mapped();
  for (size_t m = 0; m < pd.members.size(); ++m) {
    if (pd.at[m] < 0) continue;
    const int r = pd.members[m];
    const CapturedRank& rank = p_.ranks[static_cast<size_t>(r)];
    const size_t index = static_cast<size_t>(pd.at[m]);
    const CapturedRecord& rec = rank.records[index];
    if (rec.coll != CollectiveKind::barrier) {
      RankFlow& flow = *flows_[static_cast<size_t>(r)];
      flow.coll_output(rec, output(pd, m, rec, flow.coll_bytes(rec, false)));
    }
    waiting_.erase({r, index});
    next_[static_cast<size_t>(r)] = index + 1;
  }
}

// Nothing can go on: completes the first collective some rank waits at with the members that
// reached it, or lets a receive without a send go; false when no rank waits.
bool ValueFlow::force_one() {
  for (const auto& [key, pend] : pending_) {
    if (pend->arrived > 0) {
      complete(key);
      return true;
    }
  }
  for (const auto& [r, index] : waiting_) {
    const CapturedRecord& rec = p_.ranks[static_cast<size_t>(r)].records[index];
    if (rec.kind != CapturedKind::recv) continue;
    next_[static_cast<size_t>(r)] = index + 1;
    waiting_.erase({r, index});
    return true;
  }
  return false;
}

}  // namespace shardcheck::core
