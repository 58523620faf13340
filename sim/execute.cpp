// Executing stream operations: real bytes move and real arithmetic happens (kernels through
// core's CPU reference, collectives in fixed rank order; not in a shadow-only run, where
// Options::values is false), and every access is recorded in the
// rank's shadow, which the detectors read: its conflicts are races (detect_race.cpp) and its
// definedness finds reads of never-written bytes (detect_uninit.cpp).
#include <algorithm>
#include <cstring>
#include <span>

#include "core/base/status.hpp"
#include "core/runtime/collectives_cpu.hpp"
#include "sim/detector.hpp"

namespace shardcheck::sim {

using core::InternalError;

namespace {
class WorldMemory final : public core::MemoryView {
 public:
  explicit WorldMemory(std::function<std::byte*(const core::TensorRef&)> f) : f_(std::move(f)) {}
  std::byte* data(const core::TensorRef& t) override { return f_(t); }

 private:
  std::function<std::byte*(const core::TensorRef&)> f_;
};
}  // namespace

uint64_t World::address(int rank, const core::TensorRef& t) {
  return lifetimes_[ranks_[rank]->buffers.at(t.buffer)].addr + static_cast<uint64_t>(t.byte_offset());
}

std::byte* World::host_pointer(int rank, const core::TensorRef& t) {
  return lifetime_bytes_[ranks_[rank]->buffers.at(t.buffer)] + t.byte_offset();
}

void World::begin(int rank, int stream, Op& op) {
  Stream& s = ranks_[rank]->streams[stream];
  if (op.host_version > s.joined_host_version) {
    s.clock.join(ranks_[rank]->host.versions[op.host_version]);
    s.joined_host_version = op.host_version;
  }
  if (op.kind == OpKind::wait && op.record != kNone) s.clock.join(records_[op.record].clock);
  s.clock.tick(clock_index(rank, stream));
}

void World::finish(int rank, int stream, Op& op) {
  Stream& s = ranks_[rank]->streams[stream];
  OpInfo& info = op_info_[op.id];
  info.exec_step = step_;
  info.epoch = s.clock[clock_index(rank, stream)];
  digest_ = core::mix64(digest_ ^ (static_cast<uint64_t>(step_) << 20) ^
                        (static_cast<uint64_t>(participant(rank, stream)) << 4) ^ name_hash(info.name) ^
                        0x5bd1e995u);
  if (options_.record_trace) trace_.push_back({step_, rank, stream, op.id});
  ++ops_executed_;
  s.executed++;
  s.queue.pop_front();  // destroys op
  if (!s.queue.empty()) arrived(rank, stream);
}

void World::touch_range(int rank, int stream, uint32_t op, uint32_t lifetime, uint64_t a, uint64_t b,
                        Access kind) {
  const Stream& s = ranks_[rank]->streams[stream];
  const uint32_t p = clock_index(rank, stream);
  const AccessRec cur{p, s.clock[p], op, lifetime};
  conflicts_.clear();
  ranges_.clear();
  const bool poison = options_.reuse == core::PoolReuse::earliest && options_.values;
  ranks_[rank]->shadow.access(a, b, cur, kind, s.clock, conflicts_, poison ? &ranges_ : nullptr);
  // reuse: earliest poisons a block when its new lifetime first writes it, in stream order:
  // a correctly ordered program never sees the poison; an operation of the old lifetime
  // that runs later (a race) reads NaN.
  for (const auto& [x, y] : ranges_) std::memset(ranks_[rank]->heap.bytes(x), 0xff, y - x);
  const AccessEvent event{rank, cur, kind, s.clock, conflicts_};
  notify(Detector::on_access, [&](Detector& d, const WorldView& view) { d.access(view, event, findings_); });
}

void World::touch(int rank, int stream, uint32_t op, const core::TensorRef& t, Access kind) {
  if (!options_.detectors || t.numel == 0) return;
  const uint64_t a = address(rank, t);
  const uint32_t lifetime = ranks_[rank]->buffers[t.buffer];
  bytes_checked_ += t.bytes();
  if (options_.record_trace) {
    OpArgs& args = args_of(op);
    args.bytes += t.bytes();
    if (std::find(args.lifetimes.begin(), args.lifetimes.end(), lifetime) == args.lifetimes.end())
      args.lifetimes.push_back(lifetime);
  }
  touch_range(rank, stream, op, lifetime, a, a + static_cast<uint64_t>(t.bytes()), kind);
}

void World::execute_kernel(int rank, int stream, Op& op) {
  const core::KernelCall& k = op.kernel();
  // The inputs' definedness is looked at before the outputs overwrite them (in-place kernels).
  uint32_t origin = 0;
  const auto elems = check_kernel_inputs(rank, op.id, k, origin);
  for (const auto& in : k.reads) touch(rank, stream, op.id, in, Access::read);
  for (const auto& out : k.writes) touch(rank, stream, op.id, out, Access::write);
  set_kernel_outputs_undefined(rank, k, elems, origin);
  if (!options_.values) return;
  WorldMemory mem([&](const core::TensorRef& t) { return host_pointer(rank, t); });
  mem.cancel = core::CancelToken{options_.cancel};
  core::execute_cpu(k, mem);
}

namespace {
// One side of a collective: its tensor, or the parts of a list form laid end to end.
std::span<const core::TensorRef> side(const core::TensorRef& whole,
                                      const std::vector<core::TensorRef>& parts) {
  return parts.empty() ? std::span<const core::TensorRef>(&whole, 1)
                       : std::span<const core::TensorRef>(parts);
}
}  // namespace

void World::execute_collective(int rank, int stream) {
  const Op& head = ranks_[rank]->streams[stream].queue.front();
  Group& g = groups_[head.group];
  const int64_t k = head.instance;
  // Moved out (the instance is retired below): with a thousand members its fingerprints alone
  // are megabytes, too much to copy for every collective.
  Instance inst = std::move(g.at(k));
  ++collectives_;
  const size_t n = g.members.size();
  std::vector<Op*> ops(n);
  for (size_t m = 0; m < n; ++m) {
    mark(g.members[m], -1);
    mark(g.members[m], inst.members[m].stream);
    ops[m] = &ranks_[g.members[m]]->streams[inst.members[m].stream].queue.front();
    begin(g.members[m], inst.members[m].stream, *ops[m]);
  }
  // Definedness of the inputs, before in-place outputs overwrite them.
  std::vector<Shadow::Ranges> undef(n);
  uint32_t origin = 0;  // the first member's with undefined input bytes: what the outputs carry
  for (size_t m = 0; m < n; ++m) {
    const core::CollectiveCall& c = ops[m]->coll();
    undef[m] = undefined_side(g.members[m], ops[m]->id, side(c.input, c.input_parts), origin);
  }
  const auto& c = ops[0]->coll();
  for (size_t m = 0; m < n; ++m) {
    for (const auto& in : side(ops[m]->coll().input, ops[m]->coll().input_parts))
      touch(g.members[m], inst.members[m].stream, ops[m]->id, in, Access::read);
  }
  // Outputs are touched before the data moves: a lifetime they begin is poisoned first. A
  // reduce writes only the root's output.
  for (size_t m = 0; m < n; ++m) {
    if (c.kind == core::CollectiveKind::reduce && static_cast<int>(m) != c.root) continue;
    for (const auto& out : side(ops[m]->coll().output, ops[m]->coll().output_parts))
      touch(g.members[m], inst.members[m].stream, ops[m]->id, out, Access::write);
  }
  if (options_.values && c.kind != core::CollectiveKind::barrier) move_collective_data(g, ops);
  // Usually every input is fully defined: then no output has undefined bytes, and the
  // per-member propagation (a pass over every member's ranges) is skipped.
  if (std::any_of(undef.begin(), undef.end(), [](const Shadow::Ranges& u) { return !u.empty(); })) {
    for (size_t m = 0; m < n; ++m) {
      const core::CollectiveCall& mine = ops[m]->coll();
      set_undefined_side(g.members[m], side(mine.output, mine.output_parts),
                         collective_undefined_rel(c, undef, m), origin);
    }
  }
  join_members(g, inst, ops, k);
}

// The members' bytes, in group-rank order, through core's CPU collectives; a list form's parts
// are staged end to end around it.
void World::move_collective_data(const Group& g, const std::vector<Op*>& ops) {
  const size_t n = g.members.size();
  std::vector<std::byte*> in(n), out(n);
  std::vector<std::vector<std::byte>> staged_in(n), staged_out(n);
  for (size_t m = 0; m < n; ++m) {
    const core::CollectiveCall& c = ops[m]->coll();
    const int r = g.members[m];
    if (c.input_parts.empty()) {
      in[m] = host_pointer(r, c.input);
    } else {
      for (const auto& p : c.input_parts) {
        const std::byte* from = host_pointer(r, p);
        staged_in[m].insert(staged_in[m].end(), from, from + p.bytes());
      }
      in[m] = staged_in[m].data();
    }
    if (c.output_parts.empty()) {
      out[m] = host_pointer(r, c.output);
    } else {
      staged_out[m].resize(static_cast<size_t>(c.output.bytes()));
      out[m] = staged_out[m].data();
    }
  }
  core::execute_collective_cpu(ops[0]->coll(), in, out);
  for (size_t m = 0; m < n; ++m) {
    size_t at = 0;
    for (const auto& p : ops[m]->coll().output_parts) {
      std::memcpy(host_pointer(g.members[m], p), staged_out[m].data() + at, static_cast<size_t>(p.bytes()));
      at += static_cast<size_t>(p.bytes());
    }
  }
}

// A completed collective orders every member's earlier work before every member's later work;
// the group's next instance may then run where every member already has it at its head.
void World::join_members(Group& g, const Instance& inst, std::vector<Op*>& ops, int64_t k) {
  const size_t n = g.members.size();
  std::vector<const VectorClock*> clocks(n);
  for (size_t m = 0; m < n; ++m) clocks[m] = &ranks_[g.members[m]]->streams[inst.members[m].stream].clock;
  const VectorClock joined = VectorClock::join_all(clocks);
  for (size_t m = 0; m < n; ++m) {
    Stream& s = ranks_[g.members[m]]->streams[inst.members[m].stream];
    s.clock = joined;
    finish(g.members[m], inst.members[m].stream, *ops[m]);
  }
  while (!g.instances.empty() && g.first <= k) {
    g.instances.pop_front();
    ++g.first;
  }
  if (!g.instances.empty()) {
    const Instance& next = g.instances.front();
    for (size_t m = 0; m < n; ++m) {
      if (next.members[m].issued) mark(g.members[m], next.members[m].stream);
    }
  }
}

void World::execute_p2p(int rank, int stream) {
  const Op& head = ranks_[rank]->streams[stream].queue.front();
  const bool send = head.kind == OpKind::send;
  const core::P2PCall& call = head.p2p();
  const int from = send ? rank : call.peer, to = send ? call.peer : rank;
  Channel& ch = channel(from, to, call.channel);
  const int64_t k = head.instance;
  const auto pair = ch.at(k);
  ++collectives_;
  Op& s_op = ranks_[from]->streams[pair.first.stream].queue.front();
  Op& r_op = ranks_[to]->streams[pair.second.stream].queue.front();
  mark(from, -1);
  mark(from, pair.first.stream);
  mark(to, -1);
  mark(to, pair.second.stream);
  begin(from, pair.first.stream, s_op);
  begin(to, pair.second.stream, r_op);
  const core::TensorRef& sent = s_op.p2p().buffer;
  const core::TensorRef& received = r_op.p2p().buffer;
  uint32_t found = 0;
  const Shadow::Ranges undef = undefined_rel(from, sent, &found);
  const uint32_t origin = undef.empty() ? 0 : carried_origin(from, sent, found, s_op.id);
  touch(from, pair.first.stream, s_op.id, sent, Access::read);
  touch(to, pair.second.stream, r_op.id, received, Access::write);
  if (options_.values) std::memmove(host_pointer(to, received), host_pointer(from, sent), sent.bytes());
  set_undefined_rel(to, received, undef, origin);
  VectorClock joined = ranks_[from]->streams[pair.first.stream].clock;
  joined.join(ranks_[to]->streams[pair.second.stream].clock);
  ranks_[from]->streams[pair.first.stream].clock = joined;
  ranks_[to]->streams[pair.second.stream].clock = joined;
  finish(from, pair.first.stream, s_op);
  finish(to, pair.second.stream, r_op);
  while (!ch.pairs.empty() && ch.first <= k) {
    ch.pairs.pop_front();
    ++ch.first;
  }
}

void World::execute_transfer(int rank, int stream, Op& op) {
  const Transfer& t = op.transfer();
  if (op.kind == OpKind::upload) {
    touch(rank, stream, op.id, t.ref, Access::write);
    if (options_.values) std::memcpy(host_pointer(rank, t.ref), t.data.data(), t.data.size());
    return;
  }
  if (options_.detectors) check_defined(rank, op.id, t.ref);
  touch(rank, stream, op.id, t.ref, Access::read);
  if (options_.values) std::memcpy(t.out.data(), host_pointer(rank, t.ref), t.out.size());
}

void World::execute_free(int rank, int stream, Op& op) {
  const Lifetime& l = lifetimes_[op.lifetime];
  if (options_.detectors)
    touch_range(rank, stream, op.id, op.lifetime, l.addr, l.addr + l.bytes, Access::free);
  if (options_.reuse == core::PoolReuse::earliest && options_.values)
    std::memset(lifetime_bytes_[op.lifetime], 0xff, l.bytes);
}

}  // namespace shardcheck::sim
