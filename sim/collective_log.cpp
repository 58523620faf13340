#include "sim/collective_log.hpp"

#include <algorithm>

#include "sim/detector.hpp"
#include "sim/world_state.hpp"

namespace shardcheck::sim {

struct CollectiveLog::Impl final : Detector {
  std::vector<IssuedCollective> seen;

  unsigned hooks() const override { return on_collective; }

  void collective(const WorldView& w, CollectiveEvent& e, Findings&) override {
    const Group& group = w.group(e.group);
    for (size_t m = 0; m < e.instance.members.size(); ++m) {
      const Instance::Member& member = e.instance.members[m];
      const OpInfo& info = w.op(member.op);
      IssuedCollective c;
      c.rank = info.rank;
      c.op = member.op;
      c.kind = member.kind;
      c.group = group.name;
      c.members = group.members;
      c.index = e.k;
      c.dtype = member.dtype;
      c.in_numel = member.in_numel;
      c.out_numel = member.out_numel;
      c.reduce = member.reduce;
      c.root = member.root;
      c.stream = w.stream(info.rank, member.stream).name;
      c.tag = member.tag;
      c.source = w.source_line(member.op);
      seen.push_back(std::move(c));
    }
  }
};

CollectiveLog::CollectiveLog() : impl_(std::make_unique<Impl>()) {}
CollectiveLog::~CollectiveLog() = default;

Detector& CollectiveLog::detector() { return *impl_; }

std::vector<std::vector<IssuedCollective>> CollectiveLog::per_rank(int ranks) const {
  std::vector<std::vector<IssuedCollective>> out(static_cast<size_t>(std::max(ranks, 0)));
  for (const IssuedCollective& c : impl_->seen) {
    if (c.rank >= 0 && c.rank < ranks) out[static_cast<size_t>(c.rank)].push_back(c);
  }
  for (auto& r : out) {
    std::sort(r.begin(), r.end(),
              [](const IssuedCollective& a, const IssuedCollective& b) { return a.op < b.op; });
  }
  return out;
}

}  // namespace shardcheck::sim
