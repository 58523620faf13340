// The interpreter of captured programs (docs/capture-format.md, "How the checker runs it"):
// each rank's records issued in file order on that rank's Runtime, every operation named by
// its Python line (Runtime::set_source). The loader is captured_program.cpp.
#include <algorithm>
#include <string>
#include <vector>

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
}  // namespace

Task<> run_captured_program(Runtime& rt, const CapturedProgram& p) {
  const CapturedRank& r = p.ranks.at(static_cast<size_t>(rt.rank()));
  std::vector<StreamId> streams;
  for (const auto& name : r.streams) streams.push_back(rt.stream(name));
  std::vector<GroupId> groups(r.groups.size(), -1);
  for (size_t g = 0; g < r.groups.size(); ++g) {
    const CapturedGroup& group = p.groups[static_cast<size_t>(r.groups[g])];
    if (std::binary_search(group.ranks.begin(), group.ranks.end(), rt.rank()))
      groups[g] = rt.group(group.name, group.ranks);
  }
  // Sources and buffer names are made once per run, when first used.
  SourceHandles source(rt, p);
  auto buffer_name = [&](int32_t s, int32_t buf) {
    return s < 0 ? "tensor " + std::to_string(buf)
                 : "tensor allocated at " + p.sources[static_cast<size_t>(s)];
  };
  std::vector<BufferId> buffers(static_cast<size_t>(r.buffers), -1);
  std::vector<EventId> events(static_cast<size_t>(r.events), -1);
  auto event = [&](int32_t e) {
    EventId& id = events[static_cast<size_t>(e)];
    if (id < 0) id = rt.create_event("event " + std::to_string(e));
    return id;
  };
  auto bytes = [&](const CapturedRange& x) {
    return TensorRef::bytes_of(buffers[static_cast<size_t>(x.buf)], x.offset, x.bytes);
  };
  // Buffers from before the capture: allocated, written on the default stream, and ordered
  // before every stream by a device sync, ahead of the first record.
  for (const auto& pre : r.pre) {
    rt.set_source(source(pre.source));
    buffers[static_cast<size_t>(pre.buf)] =
        co_await rt.alloc(pre.bytes, streams[static_cast<size_t>(pre.stream)],
                          buffer_name(pre.source, pre.buf) + " (before the capture)");
  }
  for (const auto& pre : r.pre) {
    if (pre.bytes == 0) continue;
    rt.set_source(source(pre.source));
    co_await rt.launch(
        kernels::opaque("defined before the capture", streams[0], {},
                        {TensorRef::bytes_of(buffers[static_cast<size_t>(pre.buf)], 0, pre.bytes)}));
  }
  if (!r.pre.empty()) co_await rt.sync_device();
  for (const CapturedRecord& rec : r.records) {
    rt.set_source(source(rec.source));
    const StreamId stream = streams.empty() ? -1 : streams[static_cast<size_t>(rec.stream)];
    switch (rec.kind) {
      case CapturedKind::alloc:
        buffers[static_cast<size_t>(rec.a)] =
            co_await rt.alloc(rec.n, stream, buffer_name(rec.source, rec.a));
        break;
      case CapturedKind::free:
        co_await rt.free(buffers[static_cast<size_t>(rec.a)]);
        break;
      case CapturedKind::op: {
        std::vector<TensorRef> reads, writes;
        reads.reserve(rec.reads);
        writes.reserve(rec.writes);
        for (uint32_t i = 0; i < rec.reads; ++i) reads.push_back(bytes(r.ranges[rec.first + i]));
        for (uint32_t i = 0; i < rec.writes; ++i)
          writes.push_back(bytes(r.ranges[rec.first + rec.reads + i]));
        co_await rt.launch(kernels::opaque(p.strings[static_cast<size_t>(rec.name)], stream, std::move(reads),
                                           std::move(writes)));
        break;
      }
      case CapturedKind::record_stream:
        co_await rt.record_stream(buffers[static_cast<size_t>(rec.a)], stream);
        break;
      case CapturedKind::event_record:
        co_await rt.record(event(rec.a), stream);
        break;
      case CapturedKind::event_wait:
        co_await rt.wait_event(stream, event(rec.a));
        break;
      case CapturedKind::event_sync:
        co_await rt.sync_event(event(rec.a));
        break;
      case CapturedKind::stream_sync:
        co_await rt.sync(stream);
        break;
      case CapturedKind::device_sync:
        co_await rt.sync_device();
        break;
      case CapturedKind::coll: {
        CollectiveCall c;
        c.kind = rec.coll;
        c.group = groups[static_cast<size_t>(rec.a)];
        c.stream = stream;
        c.reduce = rec.reduce;
        c.root = rec.b;
        c.tag = p.strings[static_cast<size_t>(rec.name)];
        if (rec.coll == CollectiveKind::barrier) {
          c.input.dtype = c.output.dtype = DType::u8;
        } else {
          const int64_t es = dtype_bytes(rec.dtype);
          const CapturedRange& in = r.ranges[rec.first];
          const CapturedRange& out = r.ranges[rec.first + 1];
          c.input = {buffers[static_cast<size_t>(in.buf)], in.offset / es, in.bytes / es, rec.dtype};
          c.output = {buffers[static_cast<size_t>(out.buf)], out.offset / es, out.bytes / es, rec.dtype};
        }
        co_await rt.collective(std::move(c));
        break;
      }
      case CapturedKind::send:
      case CapturedKind::recv: {
        const CapturedRange& x = r.ranges[rec.first];
        P2PCall call{rec.a, stream,
                     TensorRef::bytes_of(buffers[static_cast<size_t>(x.buf)], x.offset,
                                         rec.n * dtype_bytes(rec.dtype)),
                     p.strings[static_cast<size_t>(rec.name)],
                     p.groups[static_cast<size_t>(r.groups[static_cast<size_t>(rec.b)])].name};
        if (rec.kind == CapturedKind::send) {
          co_await rt.send(std::move(call));
        } else {
          co_await rt.recv(std::move(call));
        }
        break;
      }
    }
  }
  rt.set_source(Runtime::kNoSource);
}

}  // namespace shardcheck::core
