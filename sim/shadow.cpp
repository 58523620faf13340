// Interval shadow memory with FastTrack-style epochs, in buckets of neighbouring intervals.
#include "sim/shadow.hpp"

#include <algorithm>
#include <iterator>

namespace shardcheck::sim {

namespace {

bool ordered(const AccessRec& prior, const AccessRec& cur, const VectorClock& clock) {
  return prior.participant == kNoParticipant || prior.participant == cur.participant ||
         clock.covers(prior.participant, prior.epoch);
}

void note(std::vector<Shadow::Conflict>& out, const AccessRec& prior, Access kind) {
  for (const auto& c : out) {
    if (c.prior.op == prior.op && c.prior.lifetime == prior.lifetime) return;
  }
  out.push_back({prior, kind});
}

}  // namespace

bool Shadow::same(const Cell& x, const Cell& y) const {
  if (!(x.write == y.write) || x.lifetime != y.lifetime || x.nreads != y.nreads ||
      x.write_kind != y.write_kind || x.defined != y.defined || x.origin != y.origin)
    return false;
  for (uint8_t i = 0; i < x.nreads; ++i) {
    if (!(x.reads[i] == y.reads[i])) return false;
  }
  if (x.extra == kNoExtra || y.extra == kNoExtra) return x.extra == y.extra;
  return extras_[x.extra] == extras_[y.extra];
}

Shadow::Cell Shadow::clone(const Cell& c) {
  Cell out = c;
  if (c.extra == kNoExtra) return out;
  if (free_extras_.empty()) {
    out.extra = static_cast<uint32_t>(extras_.size());
    extras_.push_back(extras_[c.extra]);
  } else {
    out.extra = free_extras_.back();
    free_extras_.pop_back();
    extras_[out.extra] = extras_[c.extra];
  }
  return out;
}

void Shadow::release(Cell& c) {
  if (c.extra == kNoExtra) return;
  extras_[c.extra].clear();
  free_extras_.push_back(c.extra);
  c.extra = kNoExtra;
}

void Shadow::add_read(Cell& c, const AccessRec& r) {
  if (c.nreads < 2) {
    c.reads[c.nreads++] = r;
    return;
  }
  if (c.extra == kNoExtra) {
    if (free_extras_.empty()) {
      c.extra = static_cast<uint32_t>(extras_.size());
      extras_.emplace_back();
    } else {
      c.extra = free_extras_.back();
      free_extras_.pop_back();
    }
  }
  extras_[c.extra].push_back(r);
}

void Shadow::clear_reads(Cell& c) {
  c.nreads = 0;
  release(c);
}

namespace {

// The number of leading elements of the sorted [p, p + n) that are at most a: halved without a
// branch on the comparisons down to sixteen (a mispredicted branch at each step cost more than
// the search), then counted in one pass the compiler vectorizes.
size_t count_at_most(const uint64_t* p, size_t n, uint64_t a) {
  size_t lo = 0;
  while (n > 16) {
    const size_t half = n / 2;
    lo = p[lo + half - 1] <= a ? lo + half : lo;
    n -= half;
  }
  size_t c = 0;
  for (size_t k = 0; k < n; ++k) c += p[lo + k] <= a ? 1 : 0;
  return lo + c;
}

}  // namespace

Shadow::Pos Shadow::locate(uint64_t a) const {
  if (buckets_.empty()) return {0, 0};
  // The last bucket starting at or before a (the first one when none does).
  size_t i = count_at_most(firsts_.data(), firsts_.size(), a);
  if (i > 0) --i;
  const Bucket& v = buckets_[i];
  // Intervals are disjoint and sorted, so their ends are sorted too: the first ending after a.
  const size_t j = count_at_most(v.ends.data(), v.ends.size(), a);
  if (j == v.ends.size()) return {i + 1, 0};  // the next bucket starts after a
  return {i, j};
}

Shadow::Pos Shadow::next(Pos p) const {
  if (p.index + 1 < buckets_[p.bucket].items.size()) return {p.bucket, p.index + 1};
  return {p.bucket + 1, 0};
}

template <class F>
void Shadow::update(uint64_t a, uint64_t b, F&& f) {
  if (a >= b) return;
  const Pos p = locate(a);
  const bool has_prev = p.index > 0 || p.bucket > 0;
  const Pos prev = !has_prev     ? p
                   : p.index > 0 ? Pos{p.bucket, p.index - 1}
                                 : Pos{p.bucket - 1, buckets_[p.bucket - 1].items.size() - 1};
  if (!at_end(p) && at(p).start == a && at(p).end == b) {
    // The usual access: one whole tensor whose bytes share one state. It is updated in place,
    // and the buckets change only when it now equals a neighbour.
    Interval& x = at(p);
    f(a, b, x.cell);
    const Pos after = next(p);
    const bool left = has_prev && at(prev).end == a && same(at(prev).cell, x.cell);
    const bool right = !at_end(after) && at(after).start == b && same(at(after).cell, x.cell);
    if (!left && !right) return;
    scratch_.clear();
    scratch_.push_back({left ? at(prev).start : a, right ? at(after).end : b, clone(x.cell)});
    replace(left ? prev : p, right ? next(after) : after);
    return;
  }
  scratch_.clear();
  Pos first = p;
  if (has_prev && at(prev).end == a) {  // an adjacent neighbour may merge with the first piece
    first = prev;
    scratch_.push_back({at(prev).start, a, clone(at(prev).cell)});
  }
  uint64_t cursor = a;
  // Every cell put in scratch_ is a copy of its own: the ones it replaces are released.
  auto piece = [&](uint64_t s, uint64_t e, const Cell& c) {
    scratch_.push_back({s, e, clone(c)});
    f(s, e, scratch_.back().cell);
  };
  Pos q = p;
  for (; !at_end(q) && at(q).start < b; q = next(q)) {
    const Interval& x = at(q);
    if (x.start > cursor) piece(cursor, x.start, Cell{});  // an untouched gap
    if (x.start < a) scratch_.push_back({x.start, a, clone(x.cell)});
    const uint64_t e = std::min(x.end, b);
    piece(std::max(x.start, a), e, x.cell);
    if (x.end > b) scratch_.push_back({b, x.end, clone(x.cell)});
    cursor = e;
  }
  if (cursor < b) piece(cursor, b, Cell{});
  if (!at_end(q) && at(q).start == b) {  // the same on the right
    scratch_.push_back({b, at(q).end, clone(at(q).cell)});
    q = next(q);
  }
  size_t w = 0;
  for (size_t r = 0; r < scratch_.size(); ++r) {
    if (w > 0 && scratch_[w - 1].end == scratch_[r].start && same(scratch_[w - 1].cell, scratch_[r].cell)) {
      scratch_[w - 1].end = scratch_[r].end;
      release(scratch_[r].cell);
    } else {
      if (w != r) scratch_[w] = scratch_[r];
      ++w;
    }
  }
  scratch_.resize(w);
  replace(first, q);
}

void Shadow::replace(Pos first, Pos last) {
  if (buckets_.empty()) {
    buckets_.emplace_back();
    firsts_.push_back(0);
  }
  if (at_end(first)) first = {buckets_.size() - 1, buckets_.back().items.size()};
  if (at_end(last)) last = {buckets_.size() - 1, buckets_.back().items.size()};
  for (size_t i = first.bucket; i <= last.bucket; ++i) {
    std::vector<Interval>& x = buckets_[i].items;
    const size_t to = i == last.bucket ? last.index : x.size();
    for (size_t k = i == first.bucket ? first.index : 0; k < to; ++k) release(x[k].cell);
  }
  const auto index = [](size_t k) { return static_cast<std::ptrdiff_t>(k); };
  const auto from_scratch = [&](size_t k) { return scratch_.begin() + index(k); };
  std::vector<Interval>& v = buckets_[first.bucket].items;
  if (first.bucket == last.bucket) {
    const size_t old_n = last.index - first.index, new_n = scratch_.size();
    const size_t common = std::min(old_n, new_n);
    std::copy(scratch_.begin(), from_scratch(common), v.begin() + index(first.index));
    if (new_n > old_n) {
      v.insert(v.begin() + index(first.index + common), from_scratch(common), from_scratch(new_n));
    } else {
      v.erase(v.begin() + index(first.index + common), v.begin() + index(last.index));
    }
    count_ = count_ + new_n - old_n;
    settle(first.bucket);
    return;
  }
  // From `first` to the end of its bucket, the buckets between, and the head of the last one.
  count_ -= v.size() - first.index;
  v.erase(v.begin() + index(first.index), v.end());
  for (size_t i = first.bucket + 1; i < last.bucket; ++i) count_ -= buckets_[i].items.size();
  std::vector<Interval>& w = buckets_[last.bucket].items;
  count_ -= last.index;
  w.erase(w.begin(), w.begin() + index(last.index));
  v.insert(v.end(), scratch_.begin(), scratch_.end());
  count_ += scratch_.size();
  buckets_.erase(buckets_.begin() + index(first.bucket + 1), buckets_.begin() + index(last.bucket));
  firsts_.erase(firsts_.begin() + index(first.bucket + 1), firsts_.begin() + index(last.bucket));
  settle(first.bucket + 1);  // the last bucket's rest (settling it first keeps `first` in place)
  settle(first.bucket);
}

void Shadow::sync(size_t i) {
  Bucket& b = buckets_[i];
  b.ends.resize(b.items.size());
  for (size_t k = 0; k < b.items.size(); ++k) b.ends[k] = b.items[k].end;
  firsts_[i] = b.items.front().start;
}

void Shadow::settle(size_t i) {
  if (i >= buckets_.size()) return;
  const auto index = [](size_t k) { return static_cast<std::ptrdiff_t>(k); };
  std::vector<Interval>& v = buckets_[i].items;
  if (v.empty()) {
    buckets_.erase(buckets_.begin() + index(i));
    firsts_.erase(firsts_.begin() + index(i));
    return;
  }
  // A small bucket takes its right neighbour in when both fit in one.
  if (v.size() < kMaxBucket / 4 && i + 1 < buckets_.size() &&
      v.size() + buckets_[i + 1].items.size() <= kMaxBucket) {
    const std::vector<Interval>& n = buckets_[i + 1].items;
    v.insert(v.end(), n.begin(), n.end());
    buckets_.erase(buckets_.begin() + index(i + 1));
    firsts_.erase(firsts_.begin() + index(i + 1));
  }
  std::vector<Interval>& u = buckets_[i].items;
  if (u.size() <= kMaxBucket) {
    sync(i);
    return;
  }
  // Over-full: cut into buckets of half the most, so the next few inserts fit.
  constexpr size_t half = kMaxBucket / 2;
  std::vector<Bucket> tail;
  for (size_t s = half; s < u.size(); s += half) {
    tail.emplace_back();
    tail.back().items.assign(u.begin() + index(s), u.begin() + index(std::min(u.size(), s + half)));
  }
  u.erase(u.begin() + index(half), u.end());
  firsts_.insert(firsts_.begin() + index(i + 1), tail.size(), 0);
  buckets_.insert(buckets_.begin() + index(i + 1), std::make_move_iterator(tail.begin()),
                  std::make_move_iterator(tail.end()));
  for (size_t k = i; k <= i + tail.size(); ++k) sync(k);
}

void Shadow::access(uint64_t a, uint64_t b, const AccessRec& cur, Access kind, const VectorClock& clock,
                    std::vector<Conflict>& conflicts, Ranges* started) {
  update(a, b, [&](uint64_t start, uint64_t end, Cell& c) {
    // Only a write (or a free) ends the older lifetime's data: a read by the newer lifetime
    // changes no byte, so the old lifetime's operations still in flight keep seeing theirs.
    // The bytes stay undefined for the newer lifetime (`undefined` compares lifetimes).
    if (cur.lifetime > c.lifetime && kind != Access::read) {
      c.lifetime = cur.lifetime;
      c.defined = false;
      c.origin = 0;
      if (started) started->emplace_back(start, end);
    }
    if (!ordered(c.write, cur, clock)) note(conflicts, c.write, c.write_kind);
    if (kind == Access::read) {
      // The reads since the last write, one per participant: this one's is replaced.
      for (uint8_t i = 0; i < c.nreads; ++i) {
        if (c.reads[i].participant == cur.participant) {
          c.reads[i] = cur;
          return;
        }
      }
      if (c.extra != kNoExtra) {
        for (AccessRec& r : extras_[c.extra]) {
          if (r.participant == cur.participant) {
            r = cur;
            return;
          }
        }
      }
      add_read(c, cur);
      return;
    }
    for (uint8_t i = 0; i < c.nreads; ++i) {
      if (!ordered(c.reads[i], cur, clock)) note(conflicts, c.reads[i], Access::read);
    }
    if (c.extra != kNoExtra) {
      for (const AccessRec& r : extras_[c.extra]) {
        if (!ordered(r, cur, clock)) note(conflicts, r, Access::read);
      }
    }
    clear_reads(c);
    c.write = cur;
    c.write_kind = kind;
    if (kind == Access::write) {
      c.defined = true;
      c.origin = 0;
    }
  });
}

void Shadow::set_defined(uint64_t a, uint64_t b, bool defined, uint32_t origin) {
  update(a, b, [&](uint64_t, uint64_t, Cell& c) {
    c.defined = defined;
    c.origin = defined ? 0 : origin;
  });
}

void Shadow::undefined(uint64_t a, uint64_t b, uint32_t lifetime, Ranges& out, uint32_t* origin) const {
  uint64_t cursor = a;
  const size_t before = out.size();
  auto emit = [&](uint64_t x, uint64_t y, uint32_t from = 0) {
    if (x >= y) return;
    if (origin && out.size() == before) *origin = from;
    if (!out.empty() && out.back().second == x) {
      out.back().second = y;
    } else {
      out.emplace_back(x, y);
    }
  };
  for (Pos p = locate(a); !at_end(p) && at(p).start < b; p = next(p)) {
    const Interval& x = at(p);
    const uint64_t s = std::max(x.start, a), e = std::min(x.end, b);
    emit(cursor, s);  // an untouched gap before this interval
    if (x.cell.lifetime < lifetime) {
      emit(s, e);  // an older lifetime's bytes: never written in this one
    } else if (!x.cell.defined) {
      emit(s, e, x.cell.origin);
    }
    cursor = e;
  }
  emit(cursor, b);
}

}  // namespace shardcheck::sim
