// Vector clocks, one component per participant (each rank's host and each of its streams).
// An access is stored as an epoch (participant, clock) after FastTrack: it happens before a
// participant's current point iff epoch <= that participant's clock[participant].
//   VectorClock c(n);  c.tick(p);  c.join(event_clock);  c.covers(q, e)
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace shardcheck::sim {

class VectorClock {
 public:
  VectorClock() = default;
  // Room for `participants`; a component past the end reads 0, and tick and join grow the
  // clock to the participants they name, so a clock costs only the participants it has seen.
  explicit VectorClock(size_t participants) : c_(participants, 0) {}

  uint32_t operator[](size_t p) const { return p < c_.size() ? c_[p] : 0; }
  size_t size() const { return c_.size(); }
  void tick(size_t p) {
    if (p >= c_.size()) c_.resize(p + 1, 0);
    ++c_[p];
  }
  void join(const VectorClock& o) {
    if (o.c_.size() > c_.size()) c_.resize(o.c_.size(), 0);
    for (size_t i = 0; i < o.c_.size(); ++i) c_[i] = std::max(c_[i], o.c_[i]);
  }
  // True when everything `p` did up to `epoch` happened before this clock's point.
  bool covers(uint32_t p, uint32_t epoch) const { return epoch <= (*this)[p]; }
  // Equal components, the missing ones read as 0.
  friend bool operator==(const VectorClock& a, const VectorClock& b) {
    const size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }

 private:
  std::vector<uint32_t> c_;
};

}  // namespace shardcheck::sim
