// The trace-program interpreter.
#include "core/scenario/trace_program.hpp"

#include <map>

namespace shardcheck::core {

namespace {

struct Names {
  std::map<std::string, StreamId> streams;
  std::map<std::string, GroupId> groups;
  std::map<std::string, EventId> events;
  std::map<std::string, BufferId> buffers;
  std::map<std::string, int64_t> sizes;  // each live buffer's bytes

  EventId event(Runtime& rt, const std::string& name) {
    auto it = events.find(name);
    if (it != events.end()) return it->second;
    return events[name] = rt.create_event(name);
  }
  TensorRef bytes(const RangeSpec& r, int64_t size_of_buffer) const {
    const int64_t n = r.bytes < 0 ? size_of_buffer - r.offset : r.bytes;
    return TensorRef::bytes_of(buffers.at(r.buffer), r.offset, n);
  }
  // A range of a buffer as elements of `t`.
  TensorRef ref(const RangeSpec& r, DType t) const {
    TensorRef b = bytes(r, sizes.at(r.buffer));
    const int64_t es = dtype_bytes(t);
    return TensorRef{b.buffer, b.offset / es, b.numel / es, t};
  }
  KernelCall kernel(const TraceStep& t, StreamId stream) const {
    std::vector<TensorRef> reads, writes;
    for (const auto& r : t.reads) reads.push_back(ref(r, DType::u8));
    for (const auto& w : t.writes) writes.push_back(ref(w, DType::u8));
    return kernels::opaque(t.name, stream, std::move(reads), std::move(writes));
  }
  CollectiveCall collective(const TraceStep& t, StreamId stream) const {
    CollectiveCall c;
    c.kind = t.op;
    c.group = groups.at(t.group);
    c.stream = stream;
    c.input = ref(t.input, t.dtype);
    c.output = ref(t.output, t.dtype);
    c.reduce = t.reduce;
    c.root = t.root;
    c.tag = t.tag;
    return c;
  }
};

}  // namespace

Task<> run_trace_program(Runtime& rt, const TraceScenario& s) {
  Names names;
  for (const auto& name : s.streams) names.streams[name] = rt.stream(name);
  for (const auto& [name, members] : s.groups) {
    if (std::find(members.begin(), members.end(), rt.rank()) != members.end())
      names.groups[name] = rt.group(name, members);
  }
  for (const TraceStep& t : s.program) {
    if (!s.runs_on(t, rt.rank())) continue;
    const StreamId stream =
        t.stream.empty() ? names.streams.at(s.streams.front()) : names.streams.at(t.stream);
    switch (t.kind) {
      case TraceStep::Kind::alloc:
        names.buffers[t.buffer] = co_await rt.alloc(t.bytes, stream, t.buffer);
        names.sizes[t.buffer] = t.bytes;
        break;
      case TraceStep::Kind::free:
        co_await rt.free(names.buffers.at(t.buffer));
        names.buffers.erase(t.buffer);
        break;
      case TraceStep::Kind::kernel:
        co_await rt.launch(names.kernel(t, stream));
        break;
      case TraceStep::Kind::wait:
        co_await rt.wait_stream(stream, names.streams.at(t.for_stream));
        break;
      case TraceStep::Kind::record:
        co_await rt.record(names.event(rt, t.event), stream);
        break;
      case TraceStep::Kind::wait_event:
        co_await rt.wait_event(stream, names.event(rt, t.event));
        break;
      case TraceStep::Kind::record_stream:
        co_await rt.record_stream(names.buffers.at(t.buffer), stream);
        break;
      case TraceStep::Kind::sync:
        co_await rt.sync(stream);
        break;
      case TraceStep::Kind::sync_device:
        co_await rt.sync_device();
        break;
      case TraceStep::Kind::sync_event:
        co_await rt.sync_event(names.event(rt, t.event));
        break;
      case TraceStep::Kind::send:
        co_await rt.send(P2PCall{t.peer, stream, names.ref(t.input, DType::u8), t.tag, ""});
        break;
      case TraceStep::Kind::recv:
        co_await rt.recv(P2PCall{t.peer, stream, names.ref(t.input, DType::u8), t.tag, ""});
        break;
      case TraceStep::Kind::collective:
        co_await rt.collective(names.collective(t, stream));
        break;
    }
  }
}

}  // namespace shardcheck::core
