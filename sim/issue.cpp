// The issue side of the simulator: what happens at host time when a rank's program calls
// its Runtime. Allocation and free act here (as a caching allocator does); stream work is
// queued; collectives and p2p calls are matched to their peers' calls in order, and each
// match, once complete, is compared in detect_collective.cpp, independent of the schedule.
#include <algorithm>
#include <cstring>
#include <optional>

#include "core/base/inline_vector.hpp"
#include "core/base/status.hpp"
#include "sim/detector.hpp"
#include "sim/runtime.hpp"

namespace shardcheck::sim {

using core::InternalError;

namespace {
std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }
}  // namespace

// ---------------------------------------------------------------- SimRuntime

core::EventId SimRuntime::create_event(std::string_view name) {
  auto& r = *world_.ranks_[rank_];
  r.event_latest.push_back(kNone);
  r.event_names.emplace_back(name);
  const auto e = static_cast<uint32_t>(r.event_names.size() - 1);
  r.event_op_names.emplace_back(world_.event_op_name(rank_, e, false), world_.event_op_name(rank_, e, true));
  return static_cast<core::EventId>(r.event_latest.size() - 1);
}

core::GroupId SimRuntime::group(std::string_view name, std::span<const int> members) {
  std::vector<int> m(members.begin(), members.end());
  if (std::find(m.begin(), m.end(), rank_) == m.end()) {
    throw InternalError("group " + quoted(name) + " does not contain rank " + std::to_string(rank_));
  }
  for (int r : m) {
    if (r < 0 || r >= world_.ranks())
      throw InternalError("group " + quoted(name) + " names a rank outside the world");
  }
  int index = -1;
  for (size_t i = 0; i < world_.groups_.size(); ++i) {
    if (world_.groups_[i].name == name && world_.groups_[i].members == m) index = static_cast<int>(i);
  }
  if (index < 0) {
    Group g;
    g.name = std::string(name);
    g.members = m;
    g.text = World::group_text(g.name, m);
    g.issued.assign(m.size(), 0);
    world_.groups_.push_back(std::move(g));
    index = static_cast<int>(world_.groups_.size() - 1);
  }
  auto& groups = world_.ranks_[rank_]->groups;
  groups.push_back(index);
  return static_cast<core::GroupId>(groups.size() - 1);
}

std::span<const int> SimRuntime::group_members(core::GroupId g) const {
  return world_.groups_.at(world_.group_index(rank_, g)).members;
}

void SimRuntime::park(std::coroutine_handle<> h) {
  auto& host = world_.ranks_[rank_]->host;
  host.parked = h;
  host.status = Host::Status::parked;
}

void SimRuntime::do_record(core::EventId e, core::StreamId s) {
  auto& r = *world_.ranks_[rank_];
  if (e < 0 || e >= static_cast<int>(r.event_latest.size()))
    throw InternalError("record of an unknown event");
  r.event_latest[e] = world_.record(rank_, s, r.event_op_names[e].first);
}

void SimRuntime::do_wait_event(core::StreamId s, core::EventId e) {
  auto& r = *world_.ranks_[rank_];
  if (e < 0 || e >= static_cast<int>(r.event_latest.size())) throw InternalError("wait on an unknown event");
  // As in CUDA, the wait is for the event's most recent record at the time of the call; an
  // event never recorded is already complete.
  world_.wait(rank_, s, r.event_latest[e], r.event_op_names[e].second);
  if (r.event_latest[e] == kNone) {
    r.early_waits.push_back(
        {s, "record " + quoted(r.event_names[e]), static_cast<uint32_t>(world_.op_info_.size() - 1)});
  }
}

void SimRuntime::do_wait_stream(core::StreamId waiter, core::StreamId waited) {
  using Form = World::NameForm;
  const uint32_t rec = world_.record(
      rank_, waited, world_.cached_name(Form::constant, 0, 0, [] { return "record (for wait_stream)"; }));
  const auto& s = world_.ranks_[rank_]->streams.at(static_cast<size_t>(waited));
  world_.wait(rank_, waiter, rec, world_.cached_name(Form::wait_stream, s.name_id, 0, [&] {
    return "wait_stream for " + quoted(s.name);
  }));
}

void SimRuntime::do_sync(core::StreamId s) {
  world_.host_wait(rank_, {world_.record(rank_, s, "record (for host sync)")});
}

void SimRuntime::do_sync_event(core::EventId e) {
  auto& r = *world_.ranks_[rank_];
  if (e < 0 || e >= static_cast<int>(r.event_latest.size())) throw InternalError("sync on an unknown event");
  if (r.event_latest[e] != kNone) world_.host_wait(rank_, {r.event_latest[e]});
}

void SimRuntime::do_sync_device() {
  std::vector<uint32_t> recs;
  for (int s = 0; s < world_.num_streams(rank_); ++s)
    recs.push_back(world_.record(rank_, s, "record (for device sync)"));
  world_.host_wait(rank_, std::move(recs));
}

// ---------------------------------------------------------------- World: issue side

uint32_t World::new_op(int rank, int stream, OpKind kind, std::string name) {
  return new_op(rank, stream, kind, intern(name));
}

uint32_t World::new_op(int rank, int stream, OpKind kind, uint32_t name) {
  OpInfo info;
  info.rank = rank;
  info.stream = stream;
  info.kind = kind;
  info.thread = static_cast<uint16_t>(ranks_[rank]->host.thread);
  info.name = name;
  info.issue_step = step_;
  info.source = ranks_[rank]->source;
  op_info_.push_back(info);
  const uint32_t id = static_cast<uint32_t>(op_info_.size() - 1);
  digest_ = core::mix64(digest_ ^ (static_cast<uint64_t>(step_) << 20) ^ (static_cast<uint64_t>(rank) << 4) ^
                        name_hash(info.name));
  if (options_.record_trace) trace_.push_back({step_, rank, -1, id});
  return id;
}

int World::stream_of(int rank, std::string_view name) {
  auto& streams = ranks_[rank]->streams;
  for (size_t i = 0; i < streams.size(); ++i) {
    if (streams[i].name == name) return static_cast<int>(i);
  }
  if (static_cast<int>(streams.size()) >= Options::kMaxStreamsPerRank) {
    throw InternalError("rank " + std::to_string(rank) + " asks for more than " +
                        std::to_string(Options::kMaxStreamsPerRank) + " streams");
  }
  Stream s;
  s.name = std::string(name);
  s.name_id = intern(name);
  s.comm = !streams.empty();
  s.clock = VectorClock();  // grows to the components it ticks and joins
  streams.push_back(std::move(s));
  return static_cast<int>(streams.size() - 1);
}

int World::group_index(int rank, core::GroupId g) {
  const auto& groups = ranks_[rank]->groups;
  if (g < 0 || g >= static_cast<int>(groups.size())) throw InternalError("unknown process group");
  return groups[g];
}

Lifetime& World::live_buffer(int rank, core::BufferId b, const char* use) {
  const auto& buffers = ranks_[rank]->buffers;
  if (b < 0 || b >= static_cast<int>(buffers.size()))
    throw InternalError(std::string(use) + " of an unknown buffer");
  Lifetime& l = lifetimes_[buffers[b]];
  if (!l.live)
    throw InternalError(std::string(use) + " of buffer " + quoted(names_[l.name]) + " after it was freed");
  return l;
}

void World::check_ref(int rank, const core::TensorRef& t, const char* use) {
  const Lifetime& l = live_buffer(rank, t.buffer, use);
  if (t.offset < 0 || t.numel < 0 || static_cast<uint64_t>(t.byte_offset() + t.bytes()) > l.bytes) {
    throw InternalError(std::string(use) + " reaches past the end of buffer " + quoted(names_[l.name]));
  }
}

void World::push(int rank, int stream, Op&& op) {
  auto& r = *ranks_[rank];
  if (stream < 0 || stream >= static_cast<int>(r.streams.size())) throw InternalError("unknown stream");
  op.host_version = static_cast<uint32_t>(r.host.versions.size() - 1);
  Stream& s = r.streams[stream];
  // in_order: as if every kernel launch and copy blocked the host (CUDA_LAUNCH_BLOCKING).
  // Event records and waits, and communication calls, return at enqueue, as they do there
  // (NCCL's too): otherwise any pipeline's rendezvous transfers would deadlock the host.
  const bool blocking = op.kind == OpKind::kernel || op.kind == OpKind::upload;
  if (options_.policy == Policy::in_order && blocking) {
    r.host.wait_stream = stream;
    r.host.wait_position = s.issued;
  }
  s.issued++;
  s.queue.push_back(std::move(op));
  if (s.queue.size() == 1) arrived(rank, stream);
}

namespace {
// A block another host thread freed: the allocator's lock orders that free before the thread
// that takes the block (captured programs with host threads only).
void join_freeing_thread(Host& h, uint64_t free_op) {
  if (!h.threaded) return;
  const auto it = h.frees.find(static_cast<uint32_t>(free_op));
  if (it == h.frees.end() || it->second.first == h.thread) return;
  h.clock.join(h.versions[it->second.second]);
  h.versions.push_back(h.clock);
}
}  // namespace

core::BufferId World::alloc(int rank, int64_t bytes, int stream, std::string_view name, uint64_t at) {
  auto& r = *ranks_[rank];
  if (stream < 0 || stream >= static_cast<int>(r.streams.size()))
    throw InternalError("alloc on an unknown stream");
  if (bytes < 0) throw InternalError("alloc of a negative size");
  // Same-stream blocks only their record_stream events keep back (a few, kept inline).
  core::InlineVector<const Block*, 8> held;
  auto legal = [&](const Block& b, int s) {
    if (b.stream == s) {
      if (options_.allocator == core::Allocator::stream_ordered) return true;  // stream order
      const bool ready = std::all_of(b.pending.begin(), b.pending.end(),
                                     [&](uint64_t rec) { return records_[rec].executed; });
      if (!ready) held.push_back(&b);
      return ready;
    }
    if (options_.allocator == core::Allocator::caching) return false;  // per-stream pools
    // cudaMallocAsync reuses across streams when the free is ordered before the new stream.
    const OpInfo& f = op_info_[b.free_op];
    if (f.exec_step < 0) return false;
    const uint32_t p = clock_index(rank, b.stream);
    return r.streams[s].clock.covers(p, f.epoch) || r.host.clock.covers(p, f.epoch);
  };
  std::optional<Heap::Allocation> placed;
  if (at != 0) placed = r.heap.place(at, static_cast<uint64_t>(bytes), stream, legal);
  Heap::Allocation a =
      placed ? std::move(*placed) : r.heap.allocate(static_cast<uint64_t>(bytes), stream, legal);
  // The pool asks about blocks in size order; the detectors hear of them in address order.
  std::sort(held.begin(), held.end(), [](const Block* x, const Block* y) { return x->addr < y->addr; });
  // Where a held block fits no worse than the one taken, the allocation could have taken it had
  // its streams run ahead: the detectors hear of the held blocks as the pool was.
  std::vector<AllocEvent::Held> could;
  if (asks(Detector::on_alloc)) {
    for (const Block* b : held) could.push_back({b->size, b->free_op, b->pending});
  }
  const uint64_t taken_size = a.reused ? r.heap.block(a.addr).size : 0;
  if (a.reused) join_freeing_thread(r.host, a.free_op);
  if (placed && !a.waited.empty()) {
    // The device's allocator handed over a block that record_stream held, so it had seen those
    // events complete: the host waits for them here (in this schedule they may not have run).
    host_wait(rank, std::vector<uint32_t>(a.waited.begin(), a.waited.end()));
  } else if (!a.waited.empty()) {
    // The allocator saw those record_stream events complete (cudaEventQuery): a host sync.
    for (uint64_t rec : a.waited) r.host.clock.join(records_[rec].clock);
    r.host.versions.push_back(r.host.clock);
  }
  Lifetime l;
  l.rank = rank;
  l.name = intern(name);
  l.addr = a.addr;
  l.bytes = static_cast<uint64_t>(bytes);
  l.stream = stream;
  l.generation = ++r.generations[a.addr];
  l.buffer = static_cast<uint32_t>(r.buffers.size());
  l.alloc_op = new_op(rank, -1, OpKind::host_alloc,
                      cached_name(NameForm::alloc, l.name, r.streams[stream].name_id, [&] {
                        return "alloc " + quoted(name) + " on " + quoted(r.streams[stream].name);
                      }));
  lifetimes_.push_back(l);
  lifetime_bytes_.push_back(options_.values ? r.heap.bytes(a.addr) : nullptr);
  lifetime_maps_.emplace_back();
  const uint32_t index = static_cast<uint32_t>(lifetimes_.size() - 1);
  const AllocEvent event{rank, index, taken_size, could};
  notify(Detector::on_alloc, [&](Detector& d, const WorldView& view) { d.alloc(view, event); });
  r.buffers.push_back(index);
  return static_cast<core::BufferId>(r.buffers.size() - 1);
}

void World::annotate(int rank, core::BufferId b, std::shared_ptr<const core::LogicalMap> map) {
  live_buffer(rank, b, "annotate");
  lifetime_maps_[ranks_[rank]->buffers[b]] = std::move(map);
}

void World::free(int rank, core::BufferId b) {
  auto& r = *ranks_[rank];
  Lifetime& l = live_buffer(rank, b, "free");
  const uint32_t index = r.buffers[b];
  l.live = false;
  const auto bname = [&] { return quoted(names_[l.name]); };
  const uint32_t free_name = cached_name(NameForm::free, l.name, 0, [&] { return "free " + bname(); });
  if (options_.allocator == core::Allocator::caching) {
    std::vector<uint64_t> pending;
    for (int s : l.recorded_streams)
      pending.push_back(record(rank, s, "record (record_stream " + bname() + ")"));
    l.free_op = new_op(rank, -1, OpKind::host_free, free_name);
    if (r.host.threaded)
      r.host.frees[l.free_op] = {r.host.thread, static_cast<uint32_t>(r.host.versions.size() - 1)};
    const FreeEvent event{rank, index, l.free_op, !pending.empty()};
    notify(Detector::on_free, [&](Detector& d, const WorldView& view) { d.free(view, event); });
    r.heap.release(l.addr, std::move(pending), l.free_op);
    return;
  }
  // cudaFreeAsync on the allocating stream, after waits for the recorded streams.
  for (int s : lifetimes_[index].recorded_streams) {
    wait(rank, l.stream, record(rank, s, "record (record_stream " + bname() + ")"),
         "wait (record_stream " + bname() + ")");
  }
  Op op;
  op.kind = OpKind::free_async;
  op.id = new_op(rank, l.stream, OpKind::free_async, free_name);
  op.lifetime = index;
  lifetimes_[index].free_op = op.id;
  r.heap.release(lifetimes_[index].addr, {}, op.id);
  push(rank, lifetimes_[index].stream, std::move(op));
}

void World::record_stream(int rank, core::BufferId b, int stream) {
  Lifetime& l = live_buffer(rank, b, "record_stream");
  if (stream < 0 || stream >= num_streams(rank)) throw InternalError("record_stream on an unknown stream");
  if (stream != l.stream &&
      std::find(l.recorded_streams.begin(), l.recorded_streams.end(), stream) == l.recorded_streams.end()) {
    l.recorded_streams.push_back(stream);
  }
}

uint32_t World::record(int rank, int stream, std::string_view what) {
  if (stream < 0 || stream >= num_streams(rank)) throw InternalError("record on an unknown stream");
  return record(rank, stream, intern(what));
}

uint32_t World::record(int rank, int stream, uint32_t name) {
  if (stream < 0 || stream >= num_streams(rank)) throw InternalError("record on an unknown stream");
  Op op;
  op.kind = OpKind::record;
  op.id = new_op(rank, stream, OpKind::record, name);
  op.record = static_cast<uint32_t>(records_.size());
  records_.push_back({rank, stream, false, VectorClock(), op.id});
  const uint32_t rec = op.record;
  push(rank, stream, std::move(op));
  return rec;
}

void World::wait(int rank, int stream, uint32_t rec, std::string_view what) {
  wait(rank, stream, rec, intern(what));
}

void World::wait(int rank, int stream, uint32_t rec, uint32_t name) {
  Op op;
  op.kind = OpKind::wait;
  op.id = new_op(rank, stream, OpKind::wait, name);
  op.record = rec;
  push(rank, stream, std::move(op));
}

void World::host_wait(int rank, std::vector<uint32_t> recs) {
  auto& host = ranks_[rank]->host;
  host.wait_records = std::move(recs);
  new_op(rank, -1, OpKind::host_sync, cached_name(NameForm::constant, 1, 0, [] { return "host sync"; }));
}

void World::host_thread(int rank, int thread, std::string_view name) {
  Host& h = ranks_[rank]->host;
  if (thread < 0 || thread > UINT16_MAX) throw InternalError("a host thread out of range");
  const size_t need = static_cast<size_t>(std::max(thread, h.thread)) + 1;
  if (h.thread_names.size() < need) h.thread_names.resize(need);
  if (!name.empty()) h.thread_names[static_cast<size_t>(thread)] = name;
  if (thread == h.thread) return;
  h.threaded = true;
  if (h.thread_clocks.size() < need) h.thread_clocks.resize(need);
  h.thread_clocks[static_cast<size_t>(h.thread)] = std::move(h.clock);
  h.clock = std::move(h.thread_clocks[static_cast<size_t>(thread)]);  // a new one has waited for nothing
  h.thread = thread;
  h.versions.push_back(h.clock);
}

void World::host_signal(int rank, int signal) {
  Host& h = ranks_[rank]->host;
  h.signals[signal] = h.clock;
}

void World::host_join(int rank, int signal) {
  Host& h = ranks_[rank]->host;
  const auto it = h.signals.find(signal);
  if (it == h.signals.end()) return;  // never marked: it orders nothing
  h.clock.join(it->second);
  h.versions.push_back(h.clock);
}

void World::launch(int rank, core::KernelCall call) {
  if (core::Status e = core::check_kernel(call); !e) throw InternalError(e.message());
  for (const auto& t : call.reads) check_ref(rank, t, "kernel read");
  for (const auto& t : call.writes) check_ref(rank, t, "kernel write");
  Op op;
  op.kind = OpKind::kernel;
  op.id = new_op(rank, call.stream, OpKind::kernel,
                 cached_name(NameForm::kernel, intern(call.name), 0, [&] { return core::op_name(call); }));
  const int stream = call.stream;
  op.call = std::move(call);
  push(rank, stream, std::move(op));
}

void World::collective(int rank, core::CollectiveCall call) {
  const int g = group_index(rank, call.group);
  Group& group = groups_[g];
  if (core::Status e = core::check_collective_shape(call, static_cast<int>(group.members.size())); !e) {
    throw InternalError(e.message());
  }
  if (call.kind != core::CollectiveKind::barrier) {  // a barrier's references are empty
    if (call.input_parts.empty()) check_ref(rank, call.input, "collective input");
    if (call.output_parts.empty()) check_ref(rank, call.output, "collective output");
    for (const auto& p : call.input_parts) check_ref(rank, p, "collective input");
    for (const auto& p : call.output_parts) check_ref(rank, p, "collective output");
  }
  if (call.stream < 0 || call.stream >= num_streams(rank))
    throw InternalError("collective on an unknown stream");
  const int mi = group.index_of(rank);
  const int64_t k = group.issued[mi]++;
  Instance& inst = group.at(k);
  Instance::Member& m = inst.members[mi];
  m.issued = true;
  m.stream = call.stream;
  m.position = ranks_[rank]->streams[call.stream].issued;
  m.tag = call.tag;
  m.origin = call.origin;
  m.input = call.input;
  m.kind = call.kind;
  m.dtype = call.input.dtype;
  m.in_numel = call.input.numel;
  m.out_numel = call.output.numel;
  m.reduce = call.reduce;
  m.root = call.root;
  inst.kind = call.kind;
  Op op;
  op.kind = OpKind::collective;
  op.id = new_op(rank, call.stream, OpKind::collective,
                 cached_name(NameForm::collective, intern(call.tag), static_cast<uint32_t>(call.kind),
                             [&] { return core::op_name(call); }));
  m.op = op.id;
  op.group = g;
  op.instance = k;
  if (options_.record_trace) {
    OpArgs& args = args_of(op.id);
    args.group = g;
    args.seq = k;
  }
  const int stream = call.stream;
  op.call = std::move(call);
  if (++inst.issued == static_cast<int>(group.members.size())) all_issued(g, inst, k);
  push(rank, stream, std::move(op));
}

void World::p2p(int rank, core::P2PCall call, bool send) {
  if (call.peer < 0 || call.peer >= ranks() || call.peer == rank)
    throw InternalError("p2p with an invalid peer");
  check_ref(rank, call.buffer, send ? "send" : "recv");
  if (call.stream < 0 || call.stream >= num_streams(rank)) throw InternalError("p2p on an unknown stream");
  Channel& ch = send ? channel(rank, call.peer, call.channel) : channel(call.peer, rank, call.channel);
  const int64_t k = send ? ch.sends++ : ch.recvs++;
  auto& pair = ch.at(k);
  Channel::Half& h = send ? pair.first : pair.second;
  h.issued = true;
  h.stream = call.stream;
  h.position = ranks_[rank]->streams[call.stream].issued;
  h.bytes = call.buffer.bytes();
  h.tag = call.tag;
  Op op;
  op.kind = send ? OpKind::send : OpKind::recv;
  op.id = new_op(rank, call.stream, op.kind, core::op_name(call, send));
  h.op = op.id;
  op.instance = k;
  const int stream = call.stream;
  const int from = send ? rank : call.peer, to = send ? call.peer : rank;
  op.call = std::move(call);
  if (pair.first.issued && pair.second.issued) all_issued(from, to, ch, k);
  push(rank, stream, std::move(op));
}

void World::upload(int rank, core::TensorRef dst, int stream, std::span<const std::byte> data) {
  check_ref(rank, dst, "upload");
  if (static_cast<int64_t>(data.size()) != dst.bytes())
    throw InternalError("upload size differs from its destination");
  Op op;
  op.kind = OpKind::upload;
  op.id = new_op(rank, stream, OpKind::upload,
                 "upload to " + quoted(names_[lifetimes_[ranks_[rank]->buffers[dst.buffer]].name]));
  op.call = Transfer{dst, {data.begin(), data.end()}, {}};
  push(rank, stream, std::move(op));
}

void World::download(int rank, core::TensorRef src, int stream, std::span<std::byte> out) {
  check_ref(rank, src, "download");
  if (static_cast<int64_t>(out.size()) != src.bytes())
    throw InternalError("download size differs from its source");
  Op op;
  op.kind = OpKind::download;
  op.id = new_op(rank, stream, OpKind::download,
                 "download of " + quoted(names_[lifetimes_[ranks_[rank]->buffers[src.buffer]].name]));
  op.call = Transfer{src, {}, out};
  push(rank, stream, std::move(op));
  host_wait(rank, {record(rank, stream, "record (for download)")});
}

void World::all_issued(int group, Instance& inst, int64_t k) {
  CollectiveEvent event{group, inst, k};
  notify(Detector::on_collective,
         [&](Detector& d, const WorldView& view) { d.collective(view, event, findings_); });
  if (event.diverged) {
    inst.mismatch = true;
    diverged_ = true;
  }
}

void World::all_issued(int from, int to, const Channel& ch, int64_t k) {
  const P2PEvent event{from, to, ch, k};
  notify(Detector::on_p2p, [&](Detector& d, const WorldView& view) { d.p2p(view, event, findings_); });
}

}  // namespace shardcheck::sim
