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
#include <type_traits>
#include <utility>
#include <vector>

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
  // Marks [a, b) defined, or undefined with `origin`: where the never-written bytes came from
  // (World's table of origins; 0: they are the buffer's own).
  void set_defined(uint64_t a, uint64_t b, bool defined, uint32_t origin = 0);
  // Appends the sub-ranges of [a, b) that are undefined for `lifetime`: never written in it
  // (bytes last touched by an older lifetime count as never written). `origin`, when given,
  // receives the first such range's origin (0 when they are the buffer's own).
  void undefined(uint64_t a, uint64_t b, uint32_t lifetime, Ranges& out, uint32_t* origin = nullptr) const;
  // Intervals held: neighbours with equal state are always merged into one.
  size_t intervals() const { return count_; }

 private:
  // A byte range's state. Plain bytes (moved with memmove inside the buckets): the first two
  // reads, the usual one or two of a compute and a comm stream, are inline; further ones, at
  // most one per participant, live in extras_[extra], which the cell owns alone.
  struct Cell {
    AccessRec write;
    AccessRec reads[2];
    uint32_t lifetime = 0;
    uint32_t extra = kNoExtra;  // reads past the inline two (only when nreads == 2)
    uint32_t origin = 0;        // undefined bytes carried from another buffer (set_defined)
    uint8_t nreads = 0;         // inline reads held
    Access write_kind = Access::write;
    bool defined = false;
  };
  static constexpr uint32_t kNoExtra = 0xffffffffu;
  struct Interval {
    uint64_t start;
    uint64_t end;
    Cell cell;
  };
  static_assert(std::is_trivially_copyable_v<Cell>, "buckets move intervals with memmove");
  // The intervals, disjoint and in address order, in buckets of at most kMaxBucket, a two-level
  // B+-tree: a lookup is a binary search over the buckets' first addresses and one within a
  // bucket, and an access rewrites a few neighbouring entries of one or two buckets in place.
  // A map with a node per interval cost four tree searches and a heap block per split, and
  // with a rank's shadow spread over hundreds of nodes, a cache miss at every step.
  static constexpr size_t kMaxBucket = 32;
  struct Bucket {
    std::vector<Interval> items;
    std::vector<uint64_t> ends;  // items[k].end, packed: a lookup reads a few lines, not every item
  };
  struct Pos {
    size_t bucket;
    size_t index;
  };

  // The first interval that ends after `a` (its bucket's end when none does there).
  Pos locate(uint64_t a) const;
  Pos next(Pos p) const;
  bool at_end(Pos p) const { return p.bucket >= buckets_.size(); }
  Interval& at(Pos p) { return buckets_[p.bucket].items[p.index]; }
  const Interval& at(Pos p) const { return buckets_[p.bucket].items[p.index]; }
  // Calls f(start, end, Cell&) on the pieces of [a, b) in address order (untouched gaps get a
  // fresh Cell), then merges equal neighbours.
  template <class F>
  void update(uint64_t a, uint64_t b, F&& f);
  // Replaces the intervals from `first` up to `last` (exclusive; `last` may be at the end of a
  // bucket or past every bucket) by scratch_, releasing the cells it removes.
  void replace(Pos first, Pos last);
  // Cells are values whose extra reads are owned: same() compares, clone() copies (a fresh
  // extra), release() gives the extra back, add_read() and clear_reads() change the reads.
  bool same(const Cell& x, const Cell& y) const;
  Cell clone(const Cell& c);
  void release(Cell& c);
  void add_read(Cell& c, const AccessRec& r);
  void clear_reads(Cell& c);
  std::vector<std::vector<AccessRec>> extras_;
  std::vector<uint32_t> free_extras_;
  // Splits an over-full bucket, drops an empty one, merges a small one into its right
  // neighbour, and sets the packed addresses of what changed.
  void settle(size_t bucket);
  void sync(size_t bucket);  // firsts_ and ends from the items

  std::vector<Bucket> buckets_;
  std::vector<uint64_t> firsts_;  // buckets_[i].front().start
  size_t count_ = 0;
  std::vector<Interval> scratch_;
};

}  // namespace shardcheck::sim
