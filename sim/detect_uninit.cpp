// Reports uninitialized_read, after MemorySanitizer: a read that consumes bytes never written in
// their lifetime (the shadow tracks definedness, sim/definedness.cpp; this words the finding).
#include "sim/detector.hpp"

namespace shardcheck::sim {

namespace {

class UninitDetector final : public Detector {
 public:
  unsigned hooks() const override { return on_undefined_read; }

  void undefined_read(const WorldView& w, const UndefinedRead& r, Findings& out) override {
    uint64_t bytes = 0;
    for (const auto& [x, y] : r.undefined) bytes += y - x;
    const core::TensorRef& t = r.tensor;
    const Lifetime& l = w.lifetime(w.rank(r.rank).buffers[t.buffer]);
    const std::string opname = w.op_text(r.op);
    const std::string& bname = w.name(l.name);
    const int64_t first = t.byte_offset() + static_cast<int64_t>(r.undefined.front().first);
    core::Finding f;
    f.kind = core::FindingKind::uninitialized_read;
    f.summary = "rank " + std::to_string(r.rank) + ": " + opname + " reads " + std::to_string(bytes) +
                " never-written bytes of '" + bname + "' (first at byte " + std::to_string(first) + ")";
    f.explanation =
        f.summary +
        ".\nThose bytes were not written in this lifetime of the buffer (a fresh allocation, or a "
        "layout gap or padding that nothing initializes); whatever they hold flows into the result.\n"
        "Fix: write the range before reading it, or read only the tensors' own elements.";
    if (w.op(r.op).source != kNone) {  // a captured program: in PyTorch terms
      f.explanation =
          f.summary +
          ".\nThose bytes were never written since the tensor was allocated (torch.empty, new_empty, "
          "an uninitialized output, or padding of a view), so whatever the block held before flows "
          "into the result.\nFix: initialize it where it is allocated (torch.zeros instead of "
          "torch.empty), or write every element before " +
          opname + " reads it.";
    }
    f.key = "uninit|" + opname + "|" + bname;
    core::ElementDetail d;
    if (w.op(r.op).source != kNone) {  // one finding per reader line and tensor (core::Spread)
      const core::SourceLine at = w.source_line(r.op);
      f.spread =
          core::spread_of(f.key + "|" + std::to_string(r.rank) + "|" + std::to_string(l.buffer), r.rank, {});
      f.key = "uninit|" + at.file + ":" + std::to_string(at.line) + "|" + bname;
    }
    d.tensor = bname;
    d.element = first;
    d.rank = r.rank;
    d.note = opname;
    d.source = w.source_line(r.op);
    f.detail = d;
    f.seed = w.options().seed;
    f.op = r.op;
    core::add_finding(out, std::move(f));
  }
};

}  // namespace

std::unique_ptr<Detector> make_uninit_detector() { return std::make_unique<UninitDetector>(); }

}  // namespace shardcheck::sim
