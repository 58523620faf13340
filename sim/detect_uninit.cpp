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
    const uint32_t lifetime = w.rank(r.rank).buffers[t.buffer];
    const Lifetime& l = w.lifetime(lifetime);
    const std::string opname = w.op_text(r.op);
    const std::string& bname = w.name(l.name);
    const int64_t first = t.byte_offset() + static_cast<int64_t>(r.undefined.front().first);
    // Bytes another buffer never wrote, carried here by elementwise kernels, collectives or
    // p2p: the finding is that buffer's, at the first operation that read them (as
    // MemorySanitizer's origins name where the value came from, not only where it was used).
    const UndefOrigin* from = nullptr;
    if (r.origin != 0 && w.undef_origin(r.origin).lifetime != lifetime) from = &w.undef_origin(r.origin);
    const Lifetime& root = from ? w.lifetime(from->lifetime) : l;
    const std::string& rname = w.name(root.name);
    const std::string first_reader = from ? w.op_text(from->op) : opname;
    core::Finding f;
    f.kind = core::FindingKind::uninitialized_read;
    f.summary = "rank " + std::to_string(r.rank) + ": " + opname + " reads " + std::to_string(bytes) +
                " never-written bytes of '" + bname + "' (first at byte " + std::to_string(first) + ")";
    if (from) {
      f.summary = "rank " + std::to_string(r.rank) + ": " + opname + " reads " + std::to_string(bytes) +
                  " bytes of '" + bname + "' (first at byte " + std::to_string(first) +
                  ") computed from never-written bytes of '" + rname + "', first read by " + first_reader;
    }
    f.explanation =
        f.summary +
        ".\nThose bytes were not written in this lifetime of the buffer (a fresh allocation, or a "
        "layout gap or padding that nothing initializes); whatever they hold flows into the result.\n"
        "Fix: write the range before reading it, or read only the tensors' own elements.";
    if (w.op(r.op).source != kNone) {  // a captured program: in PyTorch terms
      f.explanation = f.summary + ".\n" +
                      (from ? "The bytes of '" + rname + "' that " + first_reader + " read were never written"
                            : std::string("Those bytes were never written")) +
                      " since the tensor was allocated (torch.empty, new_empty, an uninitialized output, or "
                      "padding of a view), so whatever the block held before flows into the result.\nFix: "
                      "initialize '" +
                      rname +
                      "' where it is allocated (torch.zeros instead of torch.empty), or write every "
                      "element before " +
                      first_reader + " reads it.";
    }
    f.key = "uninit|" + first_reader + "|" + rname;
    if (w.op(r.op).source != kNone) {  // one finding per first reader's line and tensor (core::Spread)
      const core::SourceLine at = w.source_line(from ? from->op : r.op);
      f.spread = core::spread_of(f.key + "|" + std::to_string(r.rank) + "|" + std::to_string(root.buffer),
                                 r.rank, {});
      f.key = "uninit|" + at.file + ":" + std::to_string(at.line) + "|" + rname;
    }
    core::ElementDetail d;
    d.tensor = bname;
    d.element = first;
    d.rank = r.rank;
    d.note = opname;
    d.source = w.source_line(from ? from->op : r.op);  // the line the finding is grouped by
    f.detail = d;
    f.seed = w.options().seed;
    f.op = r.op;
    core::add_finding(out, std::move(f));
  }
};

}  // namespace

std::unique_ptr<Detector> make_uninit_detector() { return std::make_unique<UninitDetector>(); }

}  // namespace shardcheck::sim
