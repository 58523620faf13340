// Shadow state of one rank's device memory, per byte range, after ThreadSanitizer: the last
// write and the reads since, each as a (participant, epoch) plus the operation and block
// lifetime it came from, and whether the bytes were ever written in the current lifetime.
// The history survives free and reuse, so the first access of a block's new lifetime is
// checked against every access of its previous one: allocator-reuse races are found whether
// or not any value was corrupted.
//   std::vector<Shadow::Conflict> conflicts;
//   shadow.access(addr, addr + bytes, rec, Access::write, stream_clock, conflicts);
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "core/base/inline_vector.hpp"
#include "sim/clock.hpp"

namespace shardcheck::sim {

inline constexpr uint32_t kNoParticipant = 0xffffffffu;

struct AccessRec {
  uint32_t participant = kNoParticipant;  // the stream's clock component (World::clock_index)
  uint32_t epoch = 0;
  uint32_t op = 0;        // index into the run's operation table
  uint32_t lifetime = 0;  // index into the run's lifetime table
  friend bool operator==(const AccessRec&, const AccessRec&) = default;
};
static_assert(sizeof(AccessRec) == 16, "shadow records stay compact");

enum class Access : uint8_t { read, write, free };

class Shadow {
 public:
  struct Conflict {
    AccessRec prior;
    Access prior_kind;
  };
  using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

  // Checks the access [a, b) by `cur` at `clock` against the recorded history, appends every
  // prior access not ordered before it (once per prior operation), then records it. The
  // first write (or free) of a newer lifetime (a larger lifetime index) starts that lifetime
  // on the bytes. This happens when the access runs, not when the host allocates, so
  // operations of the previous lifetime still in flight see its data; a read by the newer
  // lifetime changes no byte and starts nothing, though the bytes are undefined for it.
  // `started`, when given, receives the ranges whose new lifetime this access began.
  void access(uint64_t a, uint64_t b, const AccessRec& cur, Access kind, const VectorClock& clock,
              std::vector<Conflict>& conflicts, Ranges* started = nullptr);
  void set_defined(uint64_t a, uint64_t b, bool defined);
  // Appends the sub-ranges of [a, b) that are undefined for `lifetime`: never written in it
  // (bytes last touched by an older lifetime count as never written).
  void undefined(uint64_t a, uint64_t b, uint32_t lifetime, Ranges& out) const;
  size_t intervals() const { return cells_.size(); }

 private:
  struct Cell {
    AccessRec write;
    Access write_kind = Access::write;
    // At most one per participant; the usual one or two (a compute and a comm stream) inline.
    core::InlineVector<AccessRec, 2> reads;
    uint32_t lifetime = 0;
    bool defined = false;
    friend bool operator==(const Cell&, const Cell&) = default;
  };
  struct Interval {
    uint64_t end;
    Cell cell;
  };
  using Map = std::map<uint64_t, Interval>;

  void split(uint64_t x);
  // Calls f(start, end, Cell&) on every interval covering [a, b), creating cells for
  // untouched gaps.
  template <class F>
  void for_each(uint64_t a, uint64_t b, F&& f);
  void coalesce(uint64_t a, uint64_t b);

  Map cells_;
};

}  // namespace shardcheck::sim
