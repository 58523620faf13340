// The scheduler's set of runnable entities (host programs and stream heads), kept up to date
// step by step instead of rescanned: a segment tree over slots in the order a full scan of
// the world would list them, so every policy picks exactly what it would pick from that list
// (the k-th entity, the k-th eager one, the first stream, the leftmost highest priority), in
// O(log ranks) and a scan of one rank's slots in use, whatever the rank count.
//   RunQueue q(slots);  q.set(slot, {.present = true, .eager = true, .priority = 7});
//   if (q.count() > 0) slot = q.kth(rng.uniform(q.count()));
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace shardcheck::sim {

class RunQueue {
 public:
  struct Entry {
    bool present = false;  // runnable now
    bool eager = false;    // not a communication stream (delay_comm picks these first)
    bool stream = false;   // a stream head, not a host program (in_order drains these first)
    int64_t priority = 0;  // PCT
  };
  static constexpr int kNone = -1;

  // Slots come in groups of `group` consecutive ones (a rank's host and streams): the tree
  // has a leaf per group, which sums the group's slots up to the last one ever present, so a
  // rank that uses 3 of its 65 slots costs a scan of 3 and a tree a 65th the size.
  explicit RunQueue(int slots, int group = 1) : group_(group) {
    const int groups = (slots + group - 1) / group;
    size_ = 1;
    while (size_ < groups) size_ *= 2;
    count_.assign(static_cast<size_t>(2 * size_), 0);
    eager_.assign(static_cast<size_t>(2 * size_), 0);
    streams_.assign(static_cast<size_t>(2 * size_), 0);
    best_.assign(static_cast<size_t>(2 * size_), Best{});
    entries_.assign(static_cast<size_t>(slots), Entry{});
    used_.assign(static_cast<size_t>(groups), 0);
    pending_flag_.assign(static_cast<size_t>(groups), 0);
  }

  void set(int slot, const Entry& e) {
    if (put(slot, e)) resum(slot / group_);
  }
  // Stores an entry and leaves its group to be summed by the next commit(): a step that
  // changes several slots of one group sums it once.
  void stage(int slot, const Entry& e) {
    if (!put(slot, e)) return;
    const int g = slot / group_;
    if (pending_flag_[static_cast<size_t>(g)]) return;
    pending_flag_[static_cast<size_t>(g)] = 1;
    pending_.push_back(g);
  }
  void commit() {
    for (int g : pending_) {
      pending_flag_[static_cast<size_t>(g)] = 0;
      resum(g);
    }
    pending_.clear();
  }
  const Entry& get(int slot) const { return entries_[static_cast<size_t>(slot)]; }

  int count() const { return count_[1]; }
  int eager_count() const { return eager_[1]; }
  // The k-th present slot (0-based) in slot order; kth_eager counts eager slots only.
  int kth(int k) const {
    return descend(k, count_, [](const Entry& e) { return e.present; });
  }
  int kth_eager(int k) const {
    return descend(k, eager_, [](const Entry& e) { return e.present && e.eager; });
  }
  // The first present stream slot, or kNone.
  int first_stream() const {
    return streams_[1] == 0 ? kNone
                            : descend(0, streams_, [](const Entry& e) { return e.present && e.stream; });
  }
  // The present slot of highest priority, the first in slot order among equals; kNone if none.
  int best() const { return best_[1].slot; }

 private:
  // Stores the entry; true when it changed.
  bool put(int slot, const Entry& e) {
    Entry& old = entries_[static_cast<size_t>(slot)];
    if (old.present == e.present && old.eager == e.eager && old.stream == e.stream &&
        old.priority == e.priority)
      return false;
    old = e;
    const int g = slot / group_;
    int& used = used_[static_cast<size_t>(g)];
    if (e.present) used = std::max(used, slot - g * group_ + 1);
    return true;
  }
  // Sums group g again, and the tree above it: each count by what it changed by, and the best
  // slot only where a priority is in play (PCT) or it changed.
  void resum(int g) {
    const Node leaf = summary(g);
    const size_t at = static_cast<size_t>(size_ + g);
    const int dc = leaf.count - count_[at], de = leaf.eager - eager_[at], ds = leaf.streams - streams_[at];
    const bool best_changed = !(best_[at] == leaf.best);
    if (dc == 0 && de == 0 && ds == 0 && !best_changed) return;
    for (size_t i = at; i >= 1; i /= 2) {
      count_[i] += dc;
      eager_[i] += de;
      streams_[i] += ds;
    }
    if (!best_changed) return;
    best_[at] = leaf.best;
    for (size_t i = at / 2; i >= 1; i /= 2) best_[i] = combine(best_[2 * i], best_[2 * i + 1]);
  }

  // The leftmost present slot of highest priority under a node.
  struct Best {
    int slot = kNone;
    int64_t priority = std::numeric_limits<int64_t>::min();
    friend bool operator==(const Best&, const Best&) = default;
  };
  struct Node {
    int count = 0, eager = 0, streams = 0;
    Best best;
  };
  // Group g's slots, summed in slot order.
  Node summary(int g) const {
    Node n;
    const int first = g * group_;
    for (int slot = first; slot < first + used_[static_cast<size_t>(g)]; ++slot) {
      const Entry& e = entries_[static_cast<size_t>(slot)];
      if (!e.present) continue;
      ++n.count;
      n.eager += e.eager ? 1 : 0;
      n.streams += e.stream ? 1 : 0;
      // Strictly greater: the earlier slot wins a tie, as a scan would.
      if (n.best.slot == kNone || e.priority > n.best.priority) n.best = {slot, e.priority};
    }
    return n;
  }
  static Best combine(const Best& a, const Best& b) {
    // Strictly greater: the left one (earlier in slot order) wins a tie, as a scan would.
    if (b.slot != kNone && (a.slot == kNone || b.priority > a.priority)) return b;
    return a;
  }
  template <class Counts>
  int descend(int k, const std::vector<int>& tree, Counts counts) const {
    int i = 1;
    while (i < size_) {
      const int left = tree[static_cast<size_t>(2 * i)];
      if (k < left) {
        i = 2 * i;
      } else {
        k -= left;
        i = 2 * i + 1;
      }
    }
    const int first = (i - size_) * group_;
    for (int slot = first;; ++slot) {
      if (counts(entries_[static_cast<size_t>(slot)]) && k-- == 0) return slot;
    }
  }

  int group_ = 1;
  int size_ = 1;
  // The tree, a field per array: a pick descends the counts alone, 4 bytes a node, so at a
  // thousand ranks the whole path it reads sits in a few cache lines.
  std::vector<int> count_, eager_, streams_;
  std::vector<Best> best_;
  std::vector<Entry> entries_;
  std::vector<int> used_;              // per group: one past its last slot ever present
  std::vector<int> pending_;           // groups staged since the last commit
  std::vector<uint8_t> pending_flag_;  // per group: in pending_
};

}  // namespace shardcheck::sim
