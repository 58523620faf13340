// Loading and validating trace scenarios. Parsing builds the steps; validation then walks
// the program once per rank (steps with `on:` run only on their ranks) with the buffers live
// on that rank, so a use after free in the program text, an undefined name or a
// range past a buffer's end is reported at its own line and column before anything runs.
#include "core/scenario/trace_scenario.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "core/runtime/block_pool.hpp"

namespace shardcheck::core {

namespace {

using Kind = TraceStep::Kind;

const std::pair<const char*, Kind> kStepKinds[] = {
    {"alloc", Kind::alloc},
    {"free", Kind::free},
    {"kernel", Kind::kernel},
    {"wait", Kind::wait},
    {"record", Kind::record},
    {"wait_event", Kind::wait_event},
    {"record_stream", Kind::record_stream},
    {"sync", Kind::sync},
    {"send", Kind::send},
    {"recv", Kind::recv},
    {"collective", Kind::collective},
};

class Parser {
 public:
  explicit Parser(const YamlReader& y) : y_(y) {}

  TraceScenario scenario(const YAML::Node& root) {
    TraceScenario s;
    s.file = y_.file();
    y_.keys(root,
            {"kind", "name", "description", "ranks", "streams", "groups", "allocator", "schedule", "program",
             "expect"},
            "a trace scenario");
    for (const char* k : {"name", "ranks", "streams", "program"}) y_.require(root, k, "a trace scenario");
    s.name = y_.str(root["name"], "name");
    if (root["description"]) s.description = y_.text(root["description"], "description");
    s.ranks = static_cast<int>(y_.integer(root["ranks"], "ranks", 1, TraceLimits::kMaxRanks));
    s.streams = y_.strings(root["streams"], "streams");
    if (s.streams.empty()) y_.fail(root["streams"], "a rank needs at least one stream");
    if (static_cast<int>(s.streams.size()) > TraceLimits::kMaxStreams) {
      y_.fail(root["streams"], "at most " + std::to_string(TraceLimits::kMaxStreams) + " streams per rank");
    }
    for (size_t i = 0; i < s.streams.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (s.streams[i] == s.streams[j])
          y_.fail(root["streams"][i], "stream '" + s.streams[i] + "' is declared twice");
      }
    }
    if (root["groups"]) groups(root["groups"], s);
    if (root["allocator"]) allocator(root["allocator"], s);
    if (root["schedule"]) s.schedule = read_schedule(y_, root["schedule"]);
    if (root["expect"]) {
      s.expect = read_expectation(y_, root["expect"]);
    } else {
      s.expect.given = false;
    }
    const YAML::Node prog = y_.seq(root["program"], "program");
    if (prog.size() > static_cast<size_t>(TraceLimits::kMaxProgramSteps)) {
      y_.fail(prog, "the program has " + std::to_string(prog.size()) + " steps; the limit is " +
                        std::to_string(TraceLimits::kMaxProgramSteps));
    }
    for (const auto& item : prog) s.program.push_back(step(item, s));
    totals(prog, s);
    return s;
  }

 private:
  void groups(const YAML::Node& n, TraceScenario& s) {
    y_.map(n, "groups");
    if (n.size() > static_cast<size_t>(TraceLimits::kMaxGroups)) {
      y_.fail(n,
              std::to_string(n.size()) + " groups; the limit is " + std::to_string(TraceLimits::kMaxGroups));
    }
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string name = y_.str(it->first, "a group name");
      auto ranks = y_.integers(it->second, "group members", 0, TraceLimits::kMaxRanks);
      if (ranks.empty()) y_.fail(it->second, "group '" + name + "' has no members");
      std::set<int64_t> seen;
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (ranks[i] >= s.ranks) {
          y_.fail(it->second[i], "group '" + name + "': rank " + std::to_string(ranks[i]) +
                                     " is outside the " + std::to_string(s.ranks) + " ranks (0.." +
                                     std::to_string(s.ranks - 1) + ")");
        }
        if (!seen.insert(ranks[i]).second)
          y_.fail(it->second[i],
                  "rank " + std::to_string(ranks[i]) + " appears twice in group '" + name + "'");
      }
      s.groups.emplace_back(name, std::vector<int>(ranks.begin(), ranks.end()));
    }
  }

  void allocator(const YAML::Node& n, TraceScenario& s) {
    if (n.IsMap()) {
      y_.keys(n, {"model", "reuse"}, "allocator");
      y_.require(n, "model", "allocator");
      if (n["reuse"]) {
        const std::string reuse = y_.str(n["reuse"], "allocator.reuse");
        const auto parsed = parse_reuse(reuse);
        if (!parsed) y_.fail(n["reuse"], "allocator reuse is best_fit or earliest, not '" + reuse + "'");
        s.reuse = *parsed;
      }
    }
    // Never assign one YAML::Node to another: yaml-cpp's operator= overwrites the aliased node.
    const YAML::Node model = n.IsMap() ? n["model"] : n;
    const std::string allocator = y_.str(model, "allocator");
    const auto parsed = parse_allocator(allocator);
    if (!parsed) {
      y_.fail(model, "unknown allocator '" + allocator + "' (expected caching or stream_ordered)");
    }
    s.allocator = *parsed;
  }

  RangeSpec range(const YAML::Node& n, const char* what) {
    RangeSpec r;
    r.loc = y_.loc(n);
    if (n.IsScalar()) {
      r.buffer = n.Scalar();
      return r;
    }
    y_.map(n, what);
    y_.keys(n, {"buffer", "offset", "bytes"}, what);
    y_.require(n, "buffer", what);
    r.buffer = y_.str(n["buffer"], "buffer");
    if (n["offset"]) r.offset = y_.integer(n["offset"], "offset", 0, TraceLimits::kMaxBufferBytes);
    if (n["bytes"]) r.bytes = y_.integer(n["bytes"], "bytes", 1, TraceLimits::kMaxBufferBytes);
    return r;
  }

  std::vector<RangeSpec> ranges(const YAML::Node& n, const char* what) {
    std::vector<RangeSpec> v;
    y_.seq(n, what);
    if (n.size() > static_cast<size_t>(TraceLimits::kMaxAccessesPerKernel)) {
      y_.fail(n, std::string(what) + " lists " + std::to_string(n.size()) + " ranges; a kernel has at most " +
                     std::to_string(TraceLimits::kMaxAccessesPerKernel) + " reads and writes");
    }
    for (const auto& x : n) v.push_back(range(x, what));
    return v;
  }

  // The work a program makes: steps and kernel accesses times the ranks that run them. Checked
  // before validation, which walks the program once per rank.
  void totals(const YAML::Node& prog, TraceScenario& s) {
    int64_t ops = 0, accesses = 0;
    for (const TraceStep& t : s.program) {
      ops += s.ranks_running(t);
      accesses += s.ranks_running(t) * static_cast<int64_t>(t.reads.size() + t.writes.size());
    }
    if (ops > TraceLimits::kMaxOperations) {
      y_.fail(prog, "the program runs " + std::to_string(ops) + " operations over its " +
                        std::to_string(s.ranks) + " ranks; the limit is " +
                        std::to_string(TraceLimits::kMaxOperations));
    }
    if (accesses > TraceLimits::kMaxAccesses) {
      y_.fail(prog, "the program's kernels make " + std::to_string(accesses) + " reads and writes over its " +
                        std::to_string(s.ranks) + " ranks; the limit is " +
                        std::to_string(TraceLimits::kMaxAccesses));
    }
    s.bytes_per_run = bytes_touched(s);
    if (s.bytes_per_run > TraceLimits::kMaxBytesPerRun) {
      y_.fail(prog, "the program touches " + std::to_string(s.bytes_per_run) +
                        " bytes per schedule (kernel reads and writes, collectives, sends, receives and "
                        "frees, times the ranks running them); the limit is " +
                        std::to_string(TraceLimits::kMaxBytesPerRun) + " (64 GiB)");
    }
    if (const Status why = trace_bytes_exceeded(s.bytes_per_run, s.schedule.runs); !why) {
      y_.fail(prog, "the file's " + std::to_string(s.schedule.runs) + " runs: " + why.message());
    }
  }

  // An upper bound, before validation: a buffer's size is the largest any alloc of its name
  // gives it, and a range without `bytes` runs to that size's end.
  static int64_t bytes_touched(const TraceScenario& s) {
    std::map<std::string, int64_t> size;
    for (const TraceStep& t : s.program)
      if (t.kind == TraceStep::Kind::alloc) size[t.buffer] = std::max(size[t.buffer], t.bytes);
    auto of = [&](const std::string& buffer) {
      auto it = size.find(buffer);
      return it == size.end() ? int64_t{0} : it->second;
    };
    auto range = [&](const RangeSpec& r) {
      return r.bytes >= 0 ? r.bytes : std::max<int64_t>(0, of(r.buffer) - r.offset);
    };
    int64_t total = 0;  // at most 10^6 operations of 64 accesses of 2^30 bytes: no overflow
    for (const TraceStep& t : s.program) {
      int64_t bytes = 0;
      switch (t.kind) {
        case TraceStep::Kind::kernel:
          for (const RangeSpec& r : t.reads) bytes += range(r);
          for (const RangeSpec& r : t.writes) bytes += range(r);
          break;
        case TraceStep::Kind::collective:
          bytes = range(t.input) + range(t.output);
          break;
        case TraceStep::Kind::send:
        case TraceStep::Kind::recv:
        case TraceStep::Kind::free:
          bytes = of(t.buffer);
          break;
        default:
          break;
      }
      total += bytes * s.ranks_running(t);
    }
    return total;
  }

  TraceStep step(const YAML::Node& item, const TraceScenario& s) {
    y_.map(item, "a program step");
    TraceStep t;
    t.loc = y_.loc(item);
    const char* op_name = nullptr;
    for (auto it = item.begin(); it != item.end(); ++it) {
      const std::string key = y_.str(it->first, "a step key");
      if (key == "on") continue;
      bool known = false;
      for (const auto& [name, kind] : kStepKinds) {
        if (key != name) continue;
        known = true;
        if (op_name)
          y_.fail(it->first,
                  "a step has one operation; this one has '" + std::string(op_name) + "' and '" + key + "'");
        op_name = name;
        t.kind = kind;
      }
      if (!known) {
        y_.fail(it->first, "unknown step '" + key +
                               "' (expected alloc, free, kernel, wait, record, wait_event, "
                               "record_stream, sync, send, recv, collective, or on)");
      }
    }
    if (!op_name) y_.fail(item, "a step needs an operation (alloc, free, kernel, ...)");
    const YAML::Node op = item[op_name];
    ranks_on(item, op, s, t);
    body(op, op_name, t);
    return t;
  }

  // `on:` beside the operation (`- send: {...}` then `on: [0]`) or inside its map
  // (`- send: {on: [0], ...}`): either placement, but not both.
  void ranks_on(const YAML::Node& item, const YAML::Node& op, const TraceScenario& s, TraceStep& t) {
    const bool inside = op.IsMap() && op["on"];
    if (inside && item["on"]) {
      const SourceLoc outer = y_.key_loc(item, "on");
      y_.fail_at(y_.key_loc(op, "on"), "`on:` is given twice, here and beside the operation (line " +
                                           std::to_string(outer.line) + ", column " +
                                           std::to_string(outer.column) + "); give it once");
    }
    if (!inside && !item["on"]) return;
    const YAML::Node on_node = inside ? op["on"] : item["on"];
    const std::vector<int64_t> on = y_.integers(on_node, "on", 0, s.ranks - 1);
    if (on.empty())
      y_.fail(on_node, "`on:` lists the ranks that run this step; an empty list runs it nowhere");
    for (size_t i = 0; i < on.size(); ++i) {
      if (std::find(on.begin(), on.begin() + static_cast<std::ptrdiff_t>(i), on[i]) !=
          on.begin() + static_cast<std::ptrdiff_t>(i)) {
        y_.fail(on_node[i], "rank " + std::to_string(on[i]) + " appears twice in `on:`");
      }
      t.on.push_back(static_cast<int>(on[i]));
    }
    std::sort(t.on.begin(), t.on.end());
  }

  // An operation's keys: its own, and `on:`, which may be written inside its map too.
  void op_keys(const YAML::Node& n, std::initializer_list<const char*> allowed, const char* op) const {
    std::vector<std::string> keys(allowed.begin(), allowed.end());
    keys.emplace_back("on");
    y_.keys(n, keys, op);
  }

  // The operation's map, its keys, and the ones it must have.
  void need(const YAML::Node& n, const char* op, std::initializer_list<const char*> required,
            std::initializer_list<const char*> allowed) const {
    y_.map(n, op);
    op_keys(n, allowed, op);
    for (const char* k : required) y_.require(n, k, op);
  }

  void body(const YAML::Node& n, const char* op, TraceStep& t) {
    switch (t.kind) {
      case Kind::alloc:
        need(n, op, {"buffer", "bytes"}, {"buffer", "bytes", "stream"});
        t.buffer = y_.str(n["buffer"], "buffer");
        t.bytes = y_.integer(n["bytes"], "bytes", 1, TraceLimits::kMaxBufferBytes);
        if (n["stream"]) t.stream = y_.str(n["stream"], "stream");
        break;
      case Kind::free:
        if (n.IsScalar()) {
          t.buffer = n.Scalar();
        } else {
          need(n, op, {"buffer"}, {"buffer"});
          t.buffer = y_.str(n["buffer"], "buffer");
        }
        break;
      case Kind::kernel:
        kernel(n, op, t);
        break;
      case Kind::wait:
        need(n, op, {"stream", "for"}, {"stream", "for"});
        t.stream = y_.str(n["stream"], "stream");
        t.for_stream = y_.str(n["for"], "for");
        break;
      case Kind::record:
      case Kind::wait_event:
        need(n, op, {"stream", "event"}, {"stream", "event"});
        t.stream = y_.str(n["stream"], "stream");
        t.event = y_.str(n["event"], "event");
        break;
      case Kind::record_stream:
        need(n, op, {"buffer", "stream"}, {"buffer", "stream"});
        t.buffer = y_.str(n["buffer"], "buffer");
        t.stream = y_.str(n["stream"], "stream");
        break;
      case Kind::sync:
        sync(n, op, t);
        break;
      case Kind::send:
      case Kind::recv:
        p2p(n, op, t);
        break;
      case Kind::collective:
        collective(n, t);
        break;
      case Kind::sync_device:
      case Kind::sync_event:
        break;
    }
  }

  void kernel(const YAML::Node& n, const char* op, TraceStep& t) {
    need(n, op, {"stream"}, {"name", "stream", "reads", "writes"});
    t.name = n["name"] ? y_.str(n["name"], "name") : "kernel";
    t.stream = y_.str(n["stream"], "stream");
    if (n["reads"]) t.reads = ranges(n["reads"], "reads");
    if (n["writes"]) t.writes = ranges(n["writes"], "writes");
    if (t.reads.size() + t.writes.size() > static_cast<size_t>(TraceLimits::kMaxAccessesPerKernel)) {
      y_.fail(n, "the kernel has " + std::to_string(t.reads.size() + t.writes.size()) +
                     " reads and writes; the limit is " + std::to_string(TraceLimits::kMaxAccessesPerKernel));
    }
  }

  void sync(const YAML::Node& n, const char* op, TraceStep& t) {
    if (n.IsScalar() && n.Scalar() == "device") {
      t.kind = Kind::sync_device;
      return;
    }
    if (n.IsScalar()) y_.fail(n, "sync takes {stream: NAME}, {event: NAME} or the word device");
    need(n, op, {}, {"stream", "event"});
    if (n["stream"] && n["event"])
      y_.fail(n, "sync waits for a stream or for an event, not both (write two steps)");
    if (!n["stream"] && !n["event"]) y_.fail(n, "sync needs 'stream:' or 'event:' (or is the word device)");
    if (n["event"]) {
      t.kind = Kind::sync_event;
      t.event = y_.str(n["event"], "event");
    } else {
      t.stream = y_.str(n["stream"], "stream");
    }
  }

  void p2p(const YAML::Node& n, const char* op, TraceStep& t) {
    const char* peer = t.kind == Kind::send ? "to" : "from";
    need(n, op, {peer, "buffer", "stream"}, {peer, "buffer", "stream", "tag"});
    t.peer = static_cast<int>(y_.integer(n[peer], peer, 0, TraceLimits::kMaxRanks - 1));
    t.input = range(n["buffer"], "buffer");
    t.buffer = t.input.buffer;
    t.stream = y_.str(n["stream"], "stream");
    t.tag = n["tag"] ? y_.str(n["tag"], "tag") : t.buffer;
  }

  void collective(const YAML::Node& n, TraceStep& t) {
    y_.map(n, "collective");
    op_keys(n, {"op", "group", "stream", "input", "output", "dtype", "reduce", "root", "tag"}, "collective");
    for (const char* k : {"op", "group", "stream", "input", "output"}) y_.require(n, k, "collective");
    const std::string op = y_.str(n["op"], "op");
    if (op == "all_gather")
      t.op = CollectiveKind::all_gather;
    else if (op == "reduce_scatter")
      t.op = CollectiveKind::reduce_scatter;
    else if (op == "all_reduce")
      t.op = CollectiveKind::all_reduce;
    else if (op == "broadcast")
      t.op = CollectiveKind::broadcast;
    else
      y_.fail(n["op"], "unknown collective '" + op +
                           "' (expected all_gather, reduce_scatter, all_reduce or broadcast)");
    t.group = y_.str(n["group"], "group");
    t.stream = y_.str(n["stream"], "stream");
    t.input = range(n["input"], "input");
    t.output = range(n["output"], "output");
    if (n["dtype"]) {
      auto d = parse_dtype(y_.str(n["dtype"], "dtype"));
      if (!d)
        y_.fail(n["dtype"], "unknown dtype '" + n["dtype"].Scalar() +
                                "' (expected f32, bf16, f16, f64, i8, i16, i32, i64, u8 or bool)");
      t.dtype = *d;
    }
    if (n["reduce"]) {
      const std::string r = y_.str(n["reduce"], "reduce");
      if (r == "sum")
        t.reduce = ReduceOp::sum;
      else if (r == "avg")
        t.reduce = ReduceOp::avg;
      else
        y_.fail(n["reduce"], "reduce is sum or avg, not '" + r + "'");
    }
    if (n["root"]) t.root = static_cast<int>(y_.integer(n["root"], "root", 0, TraceLimits::kMaxRanks - 1));
    t.tag = n["tag"] ? y_.str(n["tag"], "tag") : t.input.buffer;
  }

  const YamlReader& y_;
};

// Walks the program as one rank sees it and rejects what could not run.
class Validator {
 public:
  Validator(const YamlReader& y, const TraceScenario& s) : y_(y), s_(s) {}

  void run() {
    for (int r = 0; r < s_.ranks; ++r) {
      live_.clear();
      freed_.clear();
      addr_.clear();
      live_bytes_ = peak_bytes_ = segment_bytes_ = 0;
      // The simulator's allocator, replayed in program order: the segments it takes.
      pool_ = std::make_unique<BlockPool>(s_.allocator == Allocator::caching, PoolReuse::best_fit,
                                          [this](uint64_t size) { return next_segment(size); });
      for (const TraceStep& t : s_.program) {
        if (s_.runs_on(t, r)) check(t, r);
      }
      earlier_ranks_bytes_ += std::max(peak_bytes_, static_cast<int64_t>(segment_bytes_));
    }
  }

 private:
  [[noreturn]] void fail(const SourceLoc& at, const std::string& m) const { y_.fail_at(at, m); }
  std::string on_rank(int r) const { return s_.ranks > 1 ? " on rank " + std::to_string(r) : ""; }

  void stream(const TraceStep& t, const std::string& name) const {
    if (std::find(s_.streams.begin(), s_.streams.end(), name) == s_.streams.end()) {
      fail(t.loc, "undefined stream '" + name + "' (streams: " + join(s_.streams) + ")");
    }
  }
  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  }
  int64_t buffer(const SourceLoc& at, const std::string& name, int r) const {
    auto it = live_.find(name);
    if (it != live_.end()) return it->second;
    if (freed_.count(name)) fail(at, "buffer '" + name + "' is used after it was freed" + on_rank(r));
    fail(at, "undefined buffer '" + name + "'" + on_rank(r) + " (allocate it first)");
  }
  int64_t range_bytes(const RangeSpec& rs, int r) const {
    const int64_t size = buffer(rs.loc, rs.buffer, r);
    const int64_t bytes = rs.bytes < 0 ? size - rs.offset : rs.bytes;
    if (rs.offset >= size || rs.offset + bytes > size) {
      fail(rs.loc, "range [" + std::to_string(rs.offset) + ", " + std::to_string(rs.offset + bytes) +
                       ") is past the end of buffer '" + rs.buffer + "' (" + std::to_string(size) +
                       " bytes)");
    }
    return bytes;
  }

  void check(const TraceStep& t, int r) {
    switch (t.kind) {
      case Kind::alloc:
        if (!t.stream.empty()) stream(t, t.stream);
        if (live_.count(t.buffer))
          fail(t.loc, "buffer '" + t.buffer + "' is already allocated" + on_rank(r) + " (free it first)");
        live_[t.buffer] = t.bytes;
        freed_.erase(t.buffer);
        device_bytes(t, r);
        pooled_bytes(t, r);
        break;
      case Kind::free:
        live_bytes_ -= buffer(t.loc, t.buffer, r);
        pool_->release(addr_.at(t.buffer), {}, 0);
        addr_.erase(t.buffer);
        live_.erase(t.buffer);
        freed_.insert(t.buffer);
        break;
      case Kind::kernel:
        stream(t, t.stream);
        for (const auto& rs : t.reads) range_bytes(rs, r);
        for (const auto& rs : t.writes) range_bytes(rs, r);
        break;
      case Kind::wait:
        stream(t, t.stream);
        stream(t, t.for_stream);
        if (t.stream == t.for_stream)
          fail(t.loc, "a stream waiting for itself does nothing; name two different streams");
        break;
      // As in CUDA, a wait on an event not yet recorded (never, or only later in the program)
      // does nothing: it waits for the record current when it is issued. That is the bug a
      // detector should report, so the loader accepts it.
      case Kind::record:
      case Kind::wait_event:
        stream(t, t.stream);
        break;
      case Kind::record_stream:
        stream(t, t.stream);
        buffer(t.loc, t.buffer, r);
        break;
      case Kind::sync:
        stream(t, t.stream);
        break;
      case Kind::sync_device:
      case Kind::sync_event:
        break;
      case Kind::send:
      case Kind::recv:
        stream(t, t.stream);
        range_bytes(t.input, r);
        if (t.peer >= s_.ranks)
          fail(t.loc,
               "rank " + std::to_string(t.peer) + " is outside the " + std::to_string(s_.ranks) + " ranks");
        if (t.peer == r) fail(t.loc, "rank " + std::to_string(r) + " cannot send to or receive from itself");
        break;
      case Kind::collective:
        collective(t, r);
        break;
    }
  }

  // The simulator never returns a rank's memory while the run lasts, so every rank's peak of
  // allocated bytes is held at the end: their sum past the limit cannot run.
  void device_bytes(const TraceStep& t, int r) {
    live_bytes_ += t.bytes;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    if (earlier_ranks_bytes_ + peak_bytes_ > TraceLimits::kMaxDeviceBytes) {
      fail(t.loc, "with this allocation" + on_rank(r) + " the ranks hold " +
                      std::to_string(earlier_ranks_bytes_ + peak_bytes_) +
                      " bytes of device memory in all; the simulator models at most " +
                      std::to_string(TraceLimits::kMaxDeviceBytes) + " bytes (4 GiB) per run");
    }
  }

  // Both allocator models keep a freed block for the stream that allocated it: an allocation
  // on another stream cannot take it (caching never; stream_ordered only once the free is
  // ordered before that stream, which this check does not count on) and makes a new segment,
  // which the simulator also counts against its limit. Replayed in program order with every
  // record_stream use done; a schedule that holds blocks back longer and needs more stops with
  // the simulator's own bound (docs/limits.md).
  void pooled_bytes(const TraceStep& t, int r) {
    const std::string& name = t.stream.empty() ? s_.streams.front() : t.stream;
    const int stream =
        static_cast<int>(std::find(s_.streams.begin(), s_.streams.end(), name) - s_.streams.begin());
    auto legal = [](const PoolBlock& b, int s) { return b.stream == s; };
    const uint64_t before = segment_bytes_;
    addr_[t.buffer] = pool_->allocate(static_cast<uint64_t>(t.bytes), stream, legal).addr;
    if (segment_bytes_ != before &&
        earlier_ranks_bytes_ + static_cast<int64_t>(segment_bytes_) > TraceLimits::kMaxDeviceBytes) {
      fail(t.loc, "with this allocation" + on_rank(r) + " the ranks hold " +
                      std::to_string(earlier_ranks_bytes_ + static_cast<int64_t>(segment_bytes_)) +
                      " bytes of device memory in all, counting the free blocks the allocator keeps for the "
                      "stream that allocated them (an allocation on another stream does not reuse them) and "
                      "its rounding to 256 KiB segments; the simulator models at most " +
                      std::to_string(TraceLimits::kMaxDeviceBytes) + " bytes (4 GiB) per run");
    }
  }
  uint64_t next_segment(uint64_t size) {
    const uint64_t base =
        BlockPool::kSegment + segment_bytes_ + static_cast<uint64_t>(segments_++) * BlockPool::kRound;
    segment_bytes_ += size;
    return base;
  }

  void collective(const TraceStep& t, int r) {
    stream(t, t.stream);
    const std::vector<int>* members = nullptr;
    for (const auto& [name, m] : s_.groups) {
      if (name == t.group) members = &m;
    }
    if (!members) fail(t.loc, "undefined group '" + t.group + "'");
    if (std::find(members->begin(), members->end(), r) == members->end()) {
      fail(t.loc, "group '" + t.group + "' does not contain rank " + std::to_string(r) +
                      " (add `on:` to run this step on its members)");
    }
    const int64_t in = range_bytes(t.input, r), out = range_bytes(t.output, r);
    const int64_t es = dtype_bytes(t.dtype), g = static_cast<int64_t>(members->size());
    if (t.input.offset % es || t.output.offset % es)
      fail(t.loc, "input and output offsets must be whole " + std::string(to_string(t.dtype)) + " elements");
    if (in % es || out % es)
      fail(t.loc, "input and output sizes must be whole " + std::string(to_string(t.dtype)) + " elements");
    bool ok = true;
    switch (t.op) {
      case CollectiveKind::all_gather:
        ok = out == in * g;
        break;
      case CollectiveKind::reduce_scatter:
        ok = in == out * g;
        break;
      default:
        ok = in == out;
        break;
    }
    if (!ok) {
      fail(t.loc, std::string(to_string(t.op)) + " over " + std::to_string(g) + " ranks: input " +
                      std::to_string(in) + " bytes and output " + std::to_string(out) +
                      " bytes do not fit (all_gather: output = input x ranks; "
                      "reduce_scatter: input = output x ranks; others: equal)");
    }
    if (t.op == CollectiveKind::broadcast && t.root >= g)
      fail(t.loc, "root " + std::to_string(t.root) + " is not a rank of the group");
  }

  const YamlReader& y_;
  const TraceScenario& s_;
  std::map<std::string, int64_t> live_;
  std::set<std::string> freed_;
  int64_t live_bytes_ = 0, peak_bytes_ = 0;  // this rank's
  int64_t earlier_ranks_bytes_ = 0;          // the peaks (or segments) of ranks 0..r-1
  std::unique_ptr<BlockPool> pool_;          // this rank's allocator
  std::map<std::string, uint64_t> addr_;     // live buffer -> its block in pool_
  uint64_t segment_bytes_ = 0;               // this rank's segments
  int segments_ = 0;
};

Expected<TraceScenario> parse(YamlReader& y, const YAML::Node& root) { return read_trace_scenario(y, root); }

}  // namespace

TraceScenario read_trace_scenario(const YamlReader& y, const YAML::Node& root) {
  if (!root["kind"] || y.str(root["kind"], "kind") != "trace") {
    y.fail(root["kind"] ? root["kind"] : root, "expected 'kind: trace'");
  }
  TraceScenario s = Parser(y).scenario(root);
  Validator(y, s).run();
  return s;
}

bool TraceScenario::runs_on(const TraceStep& s, int rank) const {
  return s.on.empty() || std::binary_search(s.on.begin(), s.on.end(), rank);
}

Status trace_bytes_exceeded(int64_t bytes_per_run, int64_t runs) {
  if (bytes_per_run <= 0 || runs <= TraceLimits::kMaxBytesPerFile / bytes_per_run) return {};
  return fail(std::to_string(runs) + " schedules of " + std::to_string(bytes_per_run) +
              " bytes each touch more than " + std::to_string(TraceLimits::kMaxBytesPerFile) +
              " bytes (256 GiB), the limit for one file's schedules");
}

Expected<TraceScenario> load_trace_scenario(const std::string& path) {
  return YamlReader::parse_file<TraceScenario>(path, std::nullopt, parse);
}

Expected<TraceScenario> parse_trace_scenario(const std::string& text, const std::string& path) {
  return YamlReader::parse_file<TraceScenario>(path, text, parse);
}

}  // namespace shardcheck::core
