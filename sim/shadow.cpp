// Interval-map shadow memory with FastTrack-style epochs.
#include "sim/shadow.hpp"

#include <algorithm>

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

void Shadow::split(uint64_t x) {
  auto it = cells_.upper_bound(x);
  if (it == cells_.begin()) return;
  --it;
  if (it->first < x && x < it->second.end) {
    Interval right{it->second.end, it->second.cell};
    it->second.end = x;
    cells_.emplace_hint(std::next(it), x, std::move(right));
  }
}

template <class F>
void Shadow::for_each(uint64_t a, uint64_t b, F&& f) {
  split(a);
  split(b);
  auto it = cells_.lower_bound(a);
  uint64_t cursor = a;
  while (cursor < b) {
    if (it == cells_.end() || it->first > cursor) {
      const uint64_t gap_end = it == cells_.end() ? b : std::min(b, it->first);
      it = cells_.emplace_hint(it, cursor, Interval{gap_end, Cell{}});
    }
    f(it->first, it->second.end, it->second.cell);
    cursor = it->second.end;
    ++it;
  }
  coalesce(a, b);
}

void Shadow::coalesce(uint64_t a, uint64_t b) {
  auto it = cells_.lower_bound(a);
  if (it != cells_.begin()) --it;
  while (it != cells_.end() && it->first <= b) {
    auto next = std::next(it);
    if (next == cells_.end()) break;
    if (it->second.end == next->first && it->second.cell == next->second.cell) {
      it->second.end = next->second.end;
      cells_.erase(next);
    } else {
      it = next;
    }
  }
}

void Shadow::access(uint64_t a, uint64_t b, const AccessRec& cur, Access kind, const VectorClock& clock,
                    std::vector<Conflict>& conflicts, Ranges* started) {
  if (a >= b) return;
  for_each(a, b, [&](uint64_t start, uint64_t end, Cell& c) {
    // Only a write (or a free) ends the older lifetime's data: a read by the newer lifetime
    // changes no byte, so the old lifetime's operations still in flight keep seeing theirs.
    // The bytes stay undefined for the newer lifetime (`undefined` compares lifetimes).
    if (cur.lifetime > c.lifetime && kind != Access::read) {
      c.lifetime = cur.lifetime;
      c.defined = false;
      if (started) started->emplace_back(start, end);
    }
    if (!ordered(c.write, cur, clock)) note(conflicts, c.write, c.write_kind);
    if (kind == Access::read) {
      for (AccessRec& r : c.reads) {
        if (r.participant == cur.participant) {
          r = cur;
          return;
        }
      }
      c.reads.push_back(cur);
      return;
    }
    for (const AccessRec& r : c.reads) {
      if (!ordered(r, cur, clock)) note(conflicts, r, Access::read);
    }
    c.reads.clear();
    c.write = cur;
    c.write_kind = kind;
    if (kind == Access::write) c.defined = true;
  });
}

void Shadow::set_defined(uint64_t a, uint64_t b, bool defined) {
  if (a >= b) return;
  for_each(a, b, [&](uint64_t, uint64_t, Cell& c) { c.defined = defined; });
}

void Shadow::undefined(uint64_t a, uint64_t b, uint32_t lifetime, Ranges& out) const {
  uint64_t cursor = a;
  auto it = cells_.upper_bound(a);
  if (it != cells_.begin()) --it;
  auto emit = [&](uint64_t x, uint64_t y) {
    if (x >= y) return;
    if (!out.empty() && out.back().second == x) {
      out.back().second = y;
    } else {
      out.emplace_back(x, y);
    }
  };
  for (; it != cells_.end() && it->first < b; ++it) {
    const uint64_t s = std::max(it->first, a), e = std::min(it->second.end, b);
    if (e <= cursor) continue;
    emit(cursor, std::max(cursor, s));  // an untouched gap before this cell
    if (!it->second.cell.defined || it->second.cell.lifetime < lifetime) emit(std::max(cursor, s), e);
    cursor = e;
  }
  emit(cursor, b);
}

}  // namespace shardcheck::sim
