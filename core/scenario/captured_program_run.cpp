// The interpreter of captured programs (docs/capture-format.md, "How the checker runs it"):
// each rank's records issued in file order on that rank's Runtime, every operation named by
// its Python line (Runtime::set_source). The loader is captured_program.cpp.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/scenario/captured_ops.hpp"
#include "core/scenario/captured_program.hpp"

namespace shardcheck::core {

namespace {
// The Runtime's handle of each source line of a program, defined when first used.
class SourceHandles {
 public:
  SourceHandles(Runtime& rt, const CapturedProgram& p) : rt_(rt), p_(p), handles_(p.sources.size(), kUnset) {}
  uint32_t operator()(int32_t s) {
    if (s < 0) return Runtime::kNoSource;
    uint32_t& h = handles_[static_cast<size_t>(s)];
    const SourceLine& at = p_.source_lines[static_cast<size_t>(s)];
    if (h == kUnset) h = rt_.define_source(at.file, at.line);
    return h;
  }

 private:
  static constexpr uint32_t kUnset = Runtime::kNoSource - 1;
  Runtime& rt_;
  const CapturedProgram& p_;
  std::vector<uint32_t> handles_;
};

// One rank's names in the Runtime (streams, groups, buffers, events) and the calls its records
// become; the buffers and events are defined as the records reach them.
class RankCalls {
 public:
  RankCalls(Runtime& rt, const CapturedProgram& p)
      : rt_(rt), p_(p), r_(p.ranks.at(static_cast<size_t>(rt.rank()))), source(rt, p) {
    for (const auto& name : r_.streams) streams_.push_back(rt.stream(name));
    groups_.assign(r_.groups.size(), -1);
    for (size_t g = 0; g < r_.groups.size(); ++g) {
      const CapturedGroup& group = p.groups[static_cast<size_t>(r_.groups[g])];
      if (std::binary_search(group.ranks.begin(), group.ranks.end(), rt.rank()))
        groups_[g] = rt.group(group.name, group.ranks);
    }
    buffers_.assign(static_cast<size_t>(r_.buffers), -1);
    events_.assign(static_cast<size_t>(r_.events), -1);
    for (size_t i = 0; i < r_.records.size(); ++i) {
      if (r_.records[i].kind == CapturedKind::coll) coll_records_.push_back(static_cast<uint32_t>(i));
    }
  }

  const CapturedRank& rank() const { return r_; }
  StreamId stream(int32_t s) const { return streams_.empty() ? -1 : streams_[static_cast<size_t>(s)]; }
  BufferId& buffer(int32_t b) { return buffers_[static_cast<size_t>(b)]; }
  std::string buffer_name(int32_t s, int32_t buf) const {
    return s < 0 ? "tensor " + std::to_string(buf)
                 : "tensor allocated at " + p_.sources[static_cast<size_t>(s)];
  }
  // The same, made once per source line: a program allocates at a few lines, very many times.
  std::string_view buffer_name_of(int32_t s, int32_t buf) {
    if (s < 0) return scratch_name_ = buffer_name(s, buf);
    if (buffer_names_.empty()) buffer_names_.resize(p_.sources.size());
    std::string& name = buffer_names_[static_cast<size_t>(s)];
    if (name.empty()) name = buffer_name(s, buf);
    return name;
  }
  EventId event(int32_t e) {
    EventId& id = events_[static_cast<size_t>(e)];
    if (id < 0) id = rt_.create_event("event " + std::to_string(r_.event_ids[static_cast<size_t>(e)]));
    return id;
  }
  TensorRef bytes(const CapturedRange& x) const {
    return TensorRef::bytes_of(buffers_[static_cast<size_t>(x.buf)], x.offset, x.bytes);
  }

  KernelCall op(const CapturedRecord& rec, StreamId stream) const {
    std::vector<TensorRef> reads, writes;
    reads.reserve(rec.reads);
    writes.reserve(rec.writes);
    for (uint32_t i = 0; i < rec.reads; ++i) reads.push_back(bytes(r_.ranges[rec.first + i]));
    for (uint32_t i = 0; i < rec.writes; ++i) writes.push_back(bytes(r_.ranges[rec.first + rec.reads + i]));
    const std::string& name = p_.strings[static_cast<size_t>(rec.name)];
    // A copy moves bytes, never-written ones included, without using them (as MemorySanitizer
    // propagates through memcpy): its output inherits its input's definedness. Every other
    // operator consumes what it reads.
    if (is_copy_op(name) && reads.size() == 1 && writes.size() == 1 && reads[0].numel == writes[0].numel)
      return kernels::copy(stream, reads[0], writes[0], name);
    // An elementwise operator over tensors of one size (a gradient accumulated into a buffer,
    // a buffer divided in place) carries never-written elements to its output, as a copy does:
    // padding nobody wrote stays padding nobody wrote, and is reported where it is consumed.
    if (is_elementwise_op(name) && !writes.empty() && same_size(reads, writes))
      return kernels::opaque_elementwise(name, stream, std::move(reads), std::move(writes));
    return kernels::opaque(name, stream, std::move(reads), std::move(writes));
  }

  static bool same_size(const std::vector<TensorRef>& reads, const std::vector<TensorRef>& writes) {
    const int64_t n = writes.front().numel;
    auto same = [n](const TensorRef& t) { return t.numel == n; };
    return std::all_of(reads.begin(), reads.end(), same) && std::all_of(writes.begin(), writes.end(), same);
  }

  CollectiveCall collective(const CapturedRecord& rec, StreamId stream) const {
    CollectiveCall c;
    c.kind = rec.coll;
    c.group = groups_[static_cast<size_t>(rec.a)];
    c.stream = stream;
    c.reduce = rec.reduce;
    c.root = rec.b;
    c.tag = p_.strings[static_cast<size_t>(rec.name)];
    c.origin = origin(rec);
    if (rec.coll == CollectiveKind::barrier) {
      c.input.dtype = c.output.dtype = DType::u8;
      return c;
    }
    side(rec, rec.first, rec.reads, c.input, c.input_parts);
    side(rec, rec.first + rec.reads, rec.writes, c.output, c.output_parts);
    return c;
  }
  // A collective's input or output: one range, or a list form's ranges (its parts, whose whole
  // has no buffer of its own).
  void side(const CapturedRecord& rec, uint32_t first, uint16_t n, TensorRef& whole,
            std::vector<TensorRef>& parts) const {
    const int64_t es = dtype_bytes(rec.dtype);
    for (uint32_t i = 0; i < n; ++i) {
      const CapturedRange& x = r_.ranges[first + i];
      parts.push_back({buffers_[static_cast<size_t>(x.buf)], x.offset / es, x.bytes / es, rec.dtype});
    }
    if (parts.size() == 1) {
      whole = parts[0];
      parts.clear();
      return;
    }
    whole = {-1, 0, 0, rec.dtype};
    for (const TensorRef& p : parts) whole.numel += p.numel;
  }
  TensorOrigin origin(const CapturedRecord& rec) const {
    const auto index = static_cast<uint32_t>(&rec - r_.records.data());
    const auto it = std::lower_bound(coll_records_.begin(), coll_records_.end(), index);
    const CapturedOrigin& o = r_.coll_origins[static_cast<size_t>(it - coll_records_.begin())];
    TensorOrigin out;
    if (o.where == 0) return out;
    out.kind = o.parameter ? TensorOrigin::Kind::parameter : TensorOrigin::Kind::allocated;
    out.where = p_.strings[static_cast<size_t>(o.where)];
    out.nth = o.nth;
    out.of = o.of;
    out.exact = p_.frees_seen;
    return out;
  }

  P2PCall p2p(const CapturedRecord& rec, StreamId stream) const {
    const CapturedRange& x = r_.ranges[rec.first];
    return P2PCall{
        rec.a, stream,
        TensorRef::bytes_of(buffers_[static_cast<size_t>(x.buf)], x.offset, rec.n * dtype_bytes(rec.dtype)),
        p_.strings[static_cast<size_t>(rec.name)],
        p_.groups[static_cast<size_t>(r_.groups[static_cast<size_t>(rec.b)])].name};
  }

 private:
  Runtime& rt_;
  const CapturedProgram& p_;
  const CapturedRank& r_;
  std::vector<StreamId> streams_;
  std::vector<GroupId> groups_;
  std::vector<BufferId> buffers_;
  std::vector<EventId> events_;
  std::vector<uint32_t> coll_records_;  // the coll records' indices, ascending (CapturedRank::coll_origins)
  std::vector<std::string> buffer_names_;  // by source line (buffer_name_of)
  std::string scratch_name_;

 public:
  SourceHandles source;  // the records' Python lines, defined once per run when first used
};

// The order the interpreter issues a rank's records in. A host thread's records that only order
// streams and timelines (event records and waits, syncs, signals) reach their streams when that
// thread gets there; a thread the capture shows nothing ordering against the others may get
// there after the other threads' next records. In such a run of records the waits, syncs and
// signals are issued as late as the capture allows: before their thread's next record, before a
// wait for one of the signals, before a new record of an event they wait for, else at the end;
// its event records stay where they are. Waits later and records earlier, the checked schedule
// orders less than the file's, never more: what the file says the worker of gloo's all_reduce
// issued (its stream's wait for the write-back) before the main thread's in-place update is
// not taken to order that update.
class IssueOrder {
 public:
  explicit IssueOrder(const CapturedRank& r) : records_(r.records) {}

  struct Issue {
    uint32_t record = 0;  // index into CapturedRank::records
    int32_t thread = 0;   // the host thread issuing it
    int32_t name = 0;     // the thread's name (its first host_thread record's)
  };

  // Every record but the host_thread ones (the interpreter switches threads where the issues'
  // threads change).
  std::vector<Issue> operator()() {
    const auto n = static_cast<uint32_t>(records_.size());
    thread_of_.assign(n, 0);
    int32_t thread = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const CapturedRecord& rec = records_[i];
      if (rec.kind == CapturedKind::host_thread) {
        thread = rec.a;
        int32_t& name = names_[thread];  // 0: "", a thread not named (yet)
        if (name == 0) name = rec.name;
      }
      thread_of_[i] = thread;
    }
    names_.emplace(0, 0);
    for (uint32_t i = 0; i < n;) {
      uint32_t end = i;
      bool orders_only = true;
      while (end < n &&
             (records_[end].kind == CapturedKind::host_thread || thread_of_[end] == thread_of_[i])) {
        if (records_[end].kind != CapturedKind::host_thread)
          orders_only = orders_only && only_orders(records_[end]);
        ++end;
      }
      flush(thread_of_[i]);
      if (orders_only && end < n) {
        for (uint32_t j = i; j < end; ++j) hold(j);
      } else {
        for (uint32_t j = i; j < end; ++j) issue(j);
      }
      i = end;
    }
    while (!held_.empty()) flush(held_.begin()->first);
    return std::move(order_);
  }

  void push(uint32_t j) {
    const int32_t t = thread_of_[j];
    order_.push_back({j, t, names_.at(t)});
  }

 private:
  static bool only_orders(const CapturedRecord& rec) {
    switch (rec.kind) {
      case CapturedKind::event_record:
      case CapturedKind::event_wait:
      case CapturedKind::event_sync:
      case CapturedKind::stream_sync:
      case CapturedKind::device_sync:
      case CapturedKind::host_signal:
        return true;
      default:
        return false;
    }
  }

  // A record of a run that only orders: an event record stays where it is (recorded earlier
  // than the waits after it, it covers less); the others wait (a later wait orders less).
  void hold(uint32_t j) {
    const CapturedRecord& rec = records_[j];
    if (rec.kind == CapturedKind::host_thread) return;
    if (rec.kind == CapturedKind::event_record) return issue(j);
    const int32_t t = thread_of_[j];
    held_[t].push_back(j);
    if (rec.kind == CapturedKind::host_signal) signals_.emplace(rec.a, t);
    if (rec.kind == CapturedKind::event_wait || rec.kind == CapturedKind::event_sync)
      events_.emplace(rec.a, t);
  }

  void issue(uint32_t j) {
    const CapturedRecord& rec = records_[j];
    if (rec.kind == CapturedKind::host_thread) return;
    // A wait for a signal follows its mark; a record of an event follows the held waits for it
    // (a wait moved past a newer record would wait for more).
    if (rec.kind == CapturedKind::host_wait) flush_owners(signals_, rec.a);
    if (rec.kind == CapturedKind::event_record) flush_owners(events_, rec.a);
    push(j);
  }

  void flush_owners(std::multimap<int32_t, int32_t>& owners, int32_t key) {
    const auto [from, to] = owners.equal_range(key);
    std::vector<int32_t> threads;
    for (auto it = from; it != to; ++it) threads.push_back(it->second);
    owners.erase(from, to);
    for (int32_t t : threads) flush(t);
  }

  void flush(int32_t thread) {
    const auto it = held_.find(thread);
    if (it == held_.end()) return;
    const std::vector<uint32_t> held = std::move(it->second);
    held_.erase(it);
    for (uint32_t j : held) push(j);
  }

  const std::vector<CapturedRecord>& records_;
  std::vector<int32_t> thread_of_;
  std::map<int32_t, std::vector<uint32_t>> held_;  // by thread
  std::multimap<int32_t, int32_t> signals_;        // a held signal -> its thread
  std::multimap<int32_t, int32_t> events_;         // an event a held wait or sync uses -> its thread
  std::map<int32_t, int32_t> names_;               // a thread -> its name
  std::vector<Issue> order_;
};

// A threaded rank's issue order; empty for a rank of one host thread (issued in file order).
std::vector<IssueOrder::Issue> issue_order(const CapturedRank& r) {
  const bool threaded = std::any_of(r.records.begin(), r.records.end(), [](const CapturedRecord& x) {
    return x.kind == CapturedKind::host_thread;
  });
  return threaded ? IssueOrder(r)() : std::vector<IssueOrder::Issue>();
}

// Buffers from before the capture: allocated, written on the default stream, and ordered before
// every stream by a device sync, ahead of the first record.
Task<> define_pre(Runtime& rt, RankCalls& c) {
  const auto& pre_buffers = c.rank().pre;
  for (const auto& pre : pre_buffers) {
    rt.set_source(c.source(pre.source));
    const std::string name = c.buffer_name(pre.source, pre.buf) + " (before the capture)";
    c.buffer(pre.buf) = pre.address != 0
                            ? co_await rt.alloc_at(pre.bytes, c.stream(pre.stream), name, pre.address)
                            : co_await rt.alloc(pre.bytes, c.stream(pre.stream), name);
  }
  for (const auto& pre : pre_buffers) {
    if (pre.bytes == 0) continue;
    rt.set_source(c.source(pre.source));
    co_await rt.launch(kernels::opaque("defined before the capture", c.stream(0), {},
                                       {TensorRef::bytes_of(c.buffer(pre.buf), 0, pre.bytes)}));
  }
  if (!pre_buffers.empty()) co_await rt.sync_device();
}
}  // namespace

Task<> run_captured_program(Runtime& rt, const CapturedProgram& p) {
  RankCalls c(rt, p);
  co_await define_pre(rt, c);
  const std::vector<CapturedRecord>& records = c.rank().records;
  const std::vector<IssueOrder::Issue> order = issue_order(c.rank());
  const bool threaded = !order.empty();
  int32_t thread = 0;
  const size_t count = threaded ? order.size() : records.size();
  for (size_t i = 0; i < count; ++i) {
    const CapturedRecord& rec = records[threaded ? order[i].record : i];
    if (threaded && order[i].thread != thread) {
      thread = order[i].thread;
      rt.set_host_thread(thread, p.strings[static_cast<size_t>(order[i].name)]);
    }
    rt.set_source(c.source(rec.source));
    const StreamId stream = c.stream(rec.stream);
    switch (rec.kind) {
      case CapturedKind::alloc:
        c.buffer(rec.a) = rec.first != CapturedRank::kNoAddress
                              ? co_await rt.alloc_at(rec.n, stream, c.buffer_name_of(rec.source, rec.a),
                                                     c.rank().addresses[rec.first])
                              : co_await rt.alloc(rec.n, stream, c.buffer_name_of(rec.source, rec.a));
        break;
      case CapturedKind::free:
        co_await rt.free(c.buffer(rec.a));
        break;
      case CapturedKind::op:
        co_await rt.launch(c.op(rec, stream));
        break;
      case CapturedKind::record_stream:
        co_await rt.record_stream(c.buffer(rec.a), stream);
        break;
      case CapturedKind::event_record:
        co_await rt.record(c.event(rec.a), stream);
        break;
      case CapturedKind::event_wait:
        co_await rt.wait_event(stream, c.event(rec.a));
        break;
      case CapturedKind::event_sync:
        co_await rt.sync_event(c.event(rec.a));
        break;
      case CapturedKind::stream_sync:
        co_await rt.sync(stream);
        break;
      case CapturedKind::device_sync:
        co_await rt.sync_device();
        break;
      case CapturedKind::coll:
        co_await rt.collective(c.collective(rec, stream));
        break;
      case CapturedKind::send:
        co_await rt.send(c.p2p(rec, stream));
        break;
      case CapturedKind::recv:
        co_await rt.recv(c.p2p(rec, stream));
        break;
      case CapturedKind::host_thread:  // never issued: threads switch where the issue order's do
        break;
      case CapturedKind::host_signal:
        rt.host_signal(rec.a);
        break;
      case CapturedKind::host_wait:
        rt.host_join(rec.a);
        break;
    }
  }
  rt.set_source(Runtime::kNoSource);
}

}  // namespace shardcheck::core
