// The scheduler's set of runnable entities (host programs and stream heads), kept up to date
// step by step instead of rescanned: a segment tree over slots in the order a full scan of
// the world would list them, so every policy picks exactly what it would pick from that list
// (the k-th entity, the k-th eager one, the first stream, the leftmost highest priority), in
// O(log slots) whatever the rank count.
//   RunQueue q(slots);  q.set(slot, {.present = true, .eager = true, .priority = 7});
//   if (q.count() > 0) slot = q.kth(rng.uniform(q.count()));
#pragma once

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

  explicit RunQueue(int slots) {
    size_ = 1;
    while (size_ < slots) size_ *= 2;
    nodes_.assign(static_cast<size_t>(2 * size_), Node{});
    entries_.assign(static_cast<size_t>(slots), Entry{});
  }

  void set(int slot, const Entry& e) {
    Entry& old = entries_[static_cast<size_t>(slot)];
    if (old.present == e.present && old.eager == e.eager && old.stream == e.stream &&
        old.priority == e.priority)
      return;
    old = e;
    int i = size_ + slot;
    nodes_[static_cast<size_t>(i)] = leaf(slot, e);
    for (i /= 2; i >= 1; i /= 2) nodes_[static_cast<size_t>(i)] = combine(child(2 * i), child(2 * i + 1));
  }
  const Entry& get(int slot) const { return entries_[static_cast<size_t>(slot)]; }

  int count() const { return nodes_[1].count; }
  int eager_count() const { return nodes_[1].eager; }
  // The k-th present slot (0-based) in slot order; kth_eager counts eager slots only.
  int kth(int k) const { return descend(k, &Node::count); }
  int kth_eager(int k) const { return descend(k, &Node::eager); }
  // The first present stream slot, or kNone.
  int first_stream() const { return nodes_[1].streams == 0 ? kNone : descend(0, &Node::streams); }
  // The present slot of highest priority, the first in slot order among equals; kNone if none.
  int best() const { return nodes_[1].best; }

 private:
  struct Node {
    int count = 0, eager = 0, streams = 0;
    int best = kNone;
    int64_t best_priority = std::numeric_limits<int64_t>::min();
  };
  const Node& child(int i) const { return nodes_[static_cast<size_t>(i)]; }
  static Node leaf(int slot, const Entry& e) {
    if (!e.present) return Node{};
    return {1, e.eager ? 1 : 0, e.stream ? 1 : 0, slot, e.priority};
  }
  static Node combine(const Node& a, const Node& b) {
    Node n{a.count + b.count, a.eager + b.eager, a.streams + b.streams, a.best, a.best_priority};
    // Strictly greater: the left one (earlier in slot order) wins a tie, as a scan would.
    if (b.best != kNone && (a.best == kNone || b.best_priority > a.best_priority)) {
      n.best = b.best;
      n.best_priority = b.best_priority;
    }
    return n;
  }
  int descend(int k, int Node::*field) const {
    int i = 1;
    while (i < size_) {
      const int left = child(2 * i).*field;
      if (k < left) {
        i = 2 * i;
      } else {
        k -= left;
        i = 2 * i + 1;
      }
    }
    return i - size_;
  }

  int size_ = 1;
  std::vector<Node> nodes_;
  std::vector<Entry> entries_;
};

}  // namespace shardcheck::sim
