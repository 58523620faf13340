// Vector clocks, one component per participant (each rank's host and each of its streams).
// An access is stored as an epoch (participant, clock) after FastTrack: it happens before a
// participant's current point iff epoch <= that participant's clock[participant].
// Components live in fixed chunks shared copy-on-write between clocks: copying a clock (into
// an event record, a host version, every member of a collective) copies chunk pointers, a tick
// copies one chunk, and a join skips the chunks both clocks share, so the cost of each is
// what differs, not the rank count.
//   VectorClock c(n);  c.tick(p);  c.join(event_clock);  c.covers(q, e)
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/base/inline_vector.hpp"

namespace shardcheck::sim {

class VectorClock {
 public:
  static constexpr size_t kChunk = 64;  // components per chunk

  VectorClock() = default;
  // Room for `participants`; a component past the end reads 0, and tick and join grow the
  // clock to the participants they name. Chunks of zeros are not allocated.
  explicit VectorClock(size_t participants) : chunks_((participants + kChunk - 1) / kChunk, nullptr) {}
  VectorClock(const VectorClock& o) : chunks_(o.chunks_) {
    for (Chunk* c : chunks_) retain(c);
  }
  VectorClock(VectorClock&& o) noexcept : chunks_(std::move(o.chunks_)) { o.chunks_.clear(); }
  VectorClock& operator=(const VectorClock& o) {
    if (this == &o) return *this;
    for (Chunk* c : o.chunks_) retain(c);
    for (Chunk* c : chunks_) release(c);
    chunks_ = o.chunks_;
    return *this;
  }
  VectorClock& operator=(VectorClock&& o) noexcept {
    if (this == &o) return *this;
    for (Chunk* c : chunks_) release(c);
    chunks_ = std::move(o.chunks_);
    o.chunks_.clear();
    return *this;
  }
  ~VectorClock() {
    for (Chunk* c : chunks_) release(c);
  }

  uint32_t operator[](size_t p) const {
    const size_t i = p / kChunk;
    if (i >= chunks_.size() || chunks_[i] == nullptr) return 0;
    return chunks_[i]->c[p % kChunk];
  }
  // Components held (a multiple of kChunk); those past it read 0.
  size_t size() const { return chunks_.size() * kChunk; }
  void tick(size_t p) {
    const size_t i = p / kChunk;
    if (i >= chunks_.size()) chunks_.resize(i + 1, nullptr);
    ++own(i)->c[p % kChunk];
  }
  void join(const VectorClock& o) {
    if (o.chunks_.size() > chunks_.size()) chunks_.resize(o.chunks_.size(), nullptr);
    for (size_t i = 0; i < o.chunks_.size(); ++i) {
      Chunk* mine = chunks_[i];
      Chunk* theirs = o.chunks_[i];
      if (mine == theirs || theirs == nullptr) continue;
      if (mine == nullptr) {
        retain(theirs);
        chunks_[i] = theirs;
        continue;
      }
      // One pass finds which of the two is ahead anywhere.
      const Order o = compare(*mine, *theirs);
      if (!o.mine_ahead) {  // theirs dominates (or they are equal): share it
        retain(theirs);
        release(mine);
        chunks_[i] = theirs;
        continue;
      }
      if (!o.theirs_ahead) continue;  // mine dominates
      Chunk* c = own(i);
      for (size_t k = 0; k < kChunk; ++k) c->c[k] = c->c[k] < theirs->c[k] ? theirs->c[k] : c->c[k];
    }
  }
  // The join of every clock in `clocks` (a collective's members), chunk by chunk: each chunk is
  // merged from the distinct chunks the clocks hold there, so members that share a chunk (all
  // but the few whose own components sit in it) cost a pointer comparison, not a scan.
  static VectorClock join_all(const std::vector<const VectorClock*>& clocks) {
    VectorClock out;
    size_t n = 0;
    for (const VectorClock* c : clocks) n = std::max(n, c->chunks_.size());
    out.chunks_.assign(n, nullptr);
    std::vector<Chunk*> distinct;
    for (size_t i = 0; i < n; ++i) {
      distinct.clear();
      for (const VectorClock* c : clocks) {
        Chunk* x = i < c->chunks_.size() ? c->chunks_[i] : nullptr;
        if (x != nullptr && (distinct.empty() || distinct.back() != x)) distinct.push_back(x);
      }
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      if (distinct.empty()) continue;
      if (distinct.size() == 1) {
        retain(distinct[0]);
        out.chunks_[i] = distinct[0];
        continue;
      }
      Chunk* m = copy_of(*distinct[0]);
      for (size_t d = 1; d < distinct.size(); ++d) {
        const Chunk* x = distinct[d];
        for (size_t k = 0; k < kChunk; ++k) m->c[k] = m->c[k] < x->c[k] ? x->c[k] : m->c[k];
      }
      out.chunks_[i] = m;
    }
    return out;
  }
  // True when everything `p` did up to `epoch` happened before this clock's point.
  bool covers(uint32_t p, uint32_t epoch) const { return epoch <= (*this)[p]; }
  // Equal components, the missing ones read as 0.
  friend bool operator==(const VectorClock& a, const VectorClock& b) {
    const size_t n = std::max(a.chunks_.size(), b.chunks_.size());
    for (size_t i = 0; i < n; ++i) {
      const Chunk* x = i < a.chunks_.size() ? a.chunks_[i] : nullptr;
      const Chunk* y = i < b.chunks_.size() ? b.chunks_[i] : nullptr;
      if (x == y) continue;
      for (size_t k = 0; k < kChunk; ++k) {
        if ((x ? x->c[k] : 0) != (y ? y->c[k] : 0)) return false;
      }
    }
    return true;
  }

 private:
  // Reference-counted without atomics: a clock belongs to one World, which one thread runs.
  struct Chunk {
    uint32_t refs = 1;
    uint32_t c[kChunk] = {};
  };
  static void retain(Chunk* c) {
    if (c) ++c->refs;
  }
  static void release(Chunk* c) {
    if (c && --c->refs == 0) recycle(c);
  }
  // Chunks are recycled through a per-thread free list: a tick after a copy (an event record,
  // a collective) takes a fresh chunk for every operation, and malloc would cost more than
  // the copy. A clock belongs to one World, which one thread runs; a chunk freed on another
  // thread simply joins that thread's list.
  struct ChunkPool {
    std::vector<Chunk*> free;
    ~ChunkPool() {
      for (Chunk* c : free) delete c;
    }
  };
  static ChunkPool& pool() {
    thread_local ChunkPool p;
    return p;
  }
  static Chunk* fresh() {  // refs 1, components unset
    std::vector<Chunk*>& f = pool().free;
    if (f.empty()) return new Chunk;
    Chunk* c = f.back();
    f.pop_back();
    c->refs = 1;
    return c;
  }
  static Chunk* copy_of(const Chunk& from) {
    Chunk* c = fresh();
    std::memcpy(c->c, from.c, sizeof c->c);
    return c;
  }
  static void recycle(Chunk* c) {
    std::vector<Chunk*>& f = pool().free;
    if (f.size() >= kPooled) {
      delete c;
    } else {
      f.push_back(c);
    }
  }
  static constexpr size_t kPooled = 4096;  // chunks kept per thread (about 1 MiB)
  struct Order {
    bool mine_ahead;    // some component of `mine` is larger
    bool theirs_ahead;  // some component of `theirs` is larger
  };
  // Without an early exit, so that the compiler vectorizes it: a chunk is 64 components, and
  // every join of clocks that took different paths compares some.
  static Order compare(const Chunk& mine, const Chunk& theirs) {
    uint32_t m = 0, t = 0;
    for (size_t k = 0; k < kChunk; ++k) {
      m |= static_cast<uint32_t>(mine.c[k] > theirs.c[k]);
      t |= static_cast<uint32_t>(mine.c[k] < theirs.c[k]);
    }
    return {m != 0, t != 0};
  }
  // Chunk i, unshared and allocated, for writing.
  Chunk* own(size_t i) {
    Chunk*& c = chunks_[i];
    if (c == nullptr) {
      c = fresh();
      std::memset(c->c, 0, sizeof c->c);
    } else if (c->refs > 1) {
      Chunk* copy = copy_of(*c);
      --c->refs;
      c = copy;
    }
    return c;
  }

  // Four chunks (256 components: two streams of 128 ranks, World::clock_index) without a heap block,
  // so copying a clock into a record or a host version allocates nothing.
  core::InlineVector<Chunk*, 4> chunks_;
};

}  // namespace shardcheck::sim
