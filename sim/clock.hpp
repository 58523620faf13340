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
  explicit VectorClock(size_t participants) : c_(participants, 0) {}

  uint32_t operator[](size_t p) const { return c_[p]; }
  size_t size() const { return c_.size(); }
  void tick(size_t p) { ++c_[p]; }
  void join(const VectorClock& o) {
    for (size_t i = 0; i < c_.size(); ++i) c_[i] = std::max(c_[i], o.c_[i]);
  }
  // True when everything `p` did up to `epoch` happened before this clock's point.
  bool covers(uint32_t p, uint32_t epoch) const { return epoch <= c_[p]; }
  friend bool operator==(const VectorClock&, const VectorClock&) = default;

 private:
  std::vector<uint32_t> c_;
};

}  // namespace shardcheck::sim
