// Reports layout_mismatch. When every member of an all_reduce or reduce_scatter has issued
// it, each member's input is labelled with the logical elements its buffer's LogicalMap says
// it holds, and the labels are compared position by position (unannotated buffers are not).
#include <algorithm>
#include <optional>

#include "sim/detector.hpp"

namespace shardcheck::sim {

namespace {
// The labelled segments of a buffer range, relative to the range's start.
struct Label {
  int64_t start, count;
  int param;
  int64_t first;
};
std::vector<Label> labels(const core::LogicalMap& map, int64_t offset, int64_t numel) {
  std::vector<Label> out;
  for (const auto& s : map.segments) {
    const int64_t b = std::max(s.offset, offset), e = std::min(s.offset + s.count, offset + numel);
    if (b < e) out.push_back({b - offset, e - b, s.param, s.first + (b - s.offset)});
  }
  return out;
}
// The first position where both ranges are labelled with different logical elements.
std::optional<std::pair<Label, Label>> first_difference(const std::vector<Label>& a,
                                                        const std::vector<Label>& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].start, b[j].start),
                  hi = std::min(a[i].start + a[i].count, b[j].start + b[j].count);
    if (lo < hi) {
      const int64_t ea = a[i].first + (lo - a[i].start), eb = b[j].first + (lo - b[j].start);
      if (a[i].param != b[j].param || ea != eb)
        return std::pair{Label{lo, 1, a[i].param, ea}, Label{lo, 1, b[j].param, eb}};
    }
    (a[i].start + a[i].count < b[j].start + b[j].count) ? ++i : ++j;
  }
  return std::nullopt;
}
class LayoutDetector final : public Detector {
 public:
  unsigned hooks() const override { return on_collective; }

  void collective(const WorldView& w, CollectiveEvent& e, Findings& out) override {
    const Instance& inst = e.instance;
    if (inst.kind != core::CollectiveKind::all_reduce && inst.kind != core::CollectiveKind::reduce_scatter)
      return;
    const Group& g = w.group(e.group);
    std::vector<std::vector<Label>> per(inst.members.size());
    const core::LogicalMap* names = nullptr;
    for (size_t m = 0; m < inst.members.size(); ++m) {
      const core::TensorRef& in = inst.members[m].input;
      if (in.buffer < 0) return;  // a barrier among them: a mismatch, not a layout question
      const core::LogicalMap* map = w.layout(w.rank(g.members[m]).buffers[in.buffer]);
      if (!map) return;  // unannotated buffers are not checked
      names = map;
      per[m] = labels(*map, in.offset, in.numel);
    }
    for (size_t m = 1; m < inst.members.size(); ++m) {
      const auto diff = first_difference(per[0], per[m]);
      // Same elements where both overlap, but different extents: the same bug, seen at the end.
      if (!diff && labelled(per[0]) == labelled(per[m])) continue;
      core::add_finding(out, finding(w, g, inst, m, *names, per, diff));
      e.explained = true;
      return;
    }
  }

 private:
  static int64_t labelled(const std::vector<Label>& l) {
    int64_t n = 0;
    for (const auto& x : l) n += x.count;
    return n;
  }

  // Member m reduces other elements than member 0.
  static core::Finding finding(const WorldView& w, const Group& g, const Instance& inst, size_t m,
                               const core::LogicalMap& names, const std::vector<std::vector<Label>>& per,
                               const std::optional<std::pair<Label, Label>>& diff) {
    const auto name = [&](int p) { return names.param_name(p); };
    const auto extent = [&](const std::vector<Label>& l) {
      if (l.empty()) return std::string("nothing labelled");
      return name(l.front().param) + " elements [" + std::to_string(l.front().first) + ", " +
             std::to_string(l.back().first + l.back().count) + ")";
    };
    core::ElementDetail d;
    d.rank = g.members[0];
    d.other_rank = g.members[m];
    std::string what;
    if (diff) {
      const auto& [a, b] = *diff;
      d.tensor = name(a.param);
      d.element = a.first;
      d.expected = static_cast<double>(a.first);
      d.actual = static_cast<double>(b.first);
      d.note = name(b.param) + " element " + std::to_string(b.first);
      what = "position " + std::to_string(a.start) + " is " + d.tensor + " element " +
             std::to_string(a.first) + " on rank " + std::to_string(d.rank) + " but " + d.note + " on rank " +
             std::to_string(d.other_rank);
    } else {
      d.tensor = per[0].empty() ? "?" : name(per[0].front().param);
      d.note = "rank " + std::to_string(d.rank) + " reduces " + extent(per[0]) + ", rank " +
               std::to_string(d.other_rank) + " reduces " + extent(per[m]);
      what = d.note;
    }
    const std::string& op = w.name(w.op(inst.members[0].op).name);
    core::Finding f;
    f.kind = core::FindingKind::layout_mismatch;
    f.summary = op + " on group '" + g.name + "' reduces different logical elements together: " + what;
    const bool sizes_differ = inst.members[0].input.numel != inst.members[m].input.numel;
    f.explanation =
        f.summary +
        ".\nThe members hold the tensor in different layouts (their shards cover different rows)" +
        std::string(sizes_differ
                        ? ", and even different numbers of elements, so the call itself does not match"
                        : "") +
        ". Reduce the full logical tensor instead: rebuild it on every member, reduce, and copy each rank's "
        "rows back.";
    f.key = "layout|" + g.name + "|" + op;
    f.detail = d;
    f.seed = w.options().seed;
    f.op = inst.members[0].op;
    return f;
  }
};

}  // namespace

std::unique_ptr<Detector> make_layout_detector() { return std::make_unique<LayoutDetector>(); }

}  // namespace shardcheck::sim
