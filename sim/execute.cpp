// Executing stream operations: real bytes move and real arithmetic happens (kernels through
// core's CPU reference, collectives in fixed rank order), while the detectors watch every
// access: happens-before through vector clocks for races, and MemorySanitizer-style
// definedness for reads of never-written bytes.
#include <algorithm>
#include <cstring>

#include "core/runtime/collectives_cpu.hpp"
#include "core/base/status.hpp"
#include "sim/world_state.hpp"

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
  return ranks_[rank]->heap.bytes(address(rank, t));
}

void World::begin(int rank, int stream, Op& op) {
  Stream& s = ranks_[rank]->streams[stream];
  if (op.host_version > s.joined_host_version) {
    s.clock.join(ranks_[rank]->host.versions[op.host_version]);
    s.joined_host_version = op.host_version;
  }
  if (op.kind == OpKind::wait && op.record != kNone) s.clock.join(records_[op.record].clock);
  s.clock.tick(participant(rank, stream));
}

void World::finish(int rank, int stream, Op& op) {
  Stream& s = ranks_[rank]->streams[stream];
  OpInfo& info = op_info_[op.id];
  info.exec_step = step_;
  info.epoch = s.clock[participant(rank, stream)];
  digest_ = core::mix64(digest_ ^ (static_cast<uint64_t>(step_) << 20) ^
                        (static_cast<uint64_t>(participant(rank, stream)) << 4) ^ name_hashes_[info.name] ^ 0x5bd1e995u);
  if (options_.record_trace) trace_.push_back({step_, rank, stream, op.id});
  ++ops_executed_;
  s.executed++;
  s.queue.pop_front();  // destroys op
}

void World::touch_range(int rank, int stream, uint32_t op, uint32_t lifetime, uint64_t a, uint64_t b, Access kind) {
  const Stream& s = ranks_[rank]->streams[stream];
  const uint32_t p = static_cast<uint32_t>(participant(rank, stream));
  const AccessRec cur{p, s.clock[p], op, lifetime};
  conflicts_.clear();
  ranges_.clear();
  const bool poison = options_.reuse == Reuse::earliest;
  ranks_[rank]->shadow.access(a, b, cur, kind, s.clock, conflicts_, poison ? &ranges_ : nullptr);
  // reuse: earliest poisons a block when its new lifetime first touches it, in stream order:
  // a correctly ordered program never sees the poison; an operation of the old lifetime
  // that runs later (a race) reads NaN.
  for (const auto& [x, y] : ranges_) std::memset(ranks_[rank]->heap.bytes(x), 0xff, y - x);
  for (const auto& c : conflicts_) report_race(rank, cur, kind, c);
}

void World::touch(int rank, int stream, uint32_t op, const core::TensorRef& t, Access kind) {
  if (!options_.detectors || t.numel == 0) return;
  const uint64_t a = address(rank, t);
  touch_range(rank, stream, op, ranks_[rank]->buffers[t.buffer], a, a + static_cast<uint64_t>(t.bytes()), kind);
}

Shadow::Ranges World::undefined_rel(int rank, const core::TensorRef& t) {
  Shadow::Ranges out;
  if (!options_.detectors || t.numel == 0) return out;
  const uint64_t a = address(rank, t);
  ranks_[rank]->shadow.undefined(a, a + static_cast<uint64_t>(t.bytes()), ranks_[rank]->buffers[t.buffer], out);
  for (auto& [x, y] : out) {
    x -= a;
    y -= a;
  }
  return out;
}

void World::set_undefined_rel(int rank, const core::TensorRef& t, const Shadow::Ranges& rel) {
  if (!options_.detectors) return;
  const uint64_t a = address(rank, t);
  for (const auto& [x, y] : rel) ranks_[rank]->shadow.set_defined(a + x, a + y, false);
}

void World::check_defined(int rank, uint32_t op, const core::TensorRef& t) {
  const Shadow::Ranges undef = undefined_rel(rank, t);
  if (undef.empty()) return;
  uint64_t bytes = 0;
  for (const auto& [x, y] : undef) bytes += y - x;
  const Lifetime& l = lifetimes_[ranks_[rank]->buffers[t.buffer]];
  const std::string& opname = names_[op_info_[op].name];
  const std::string& bname = names_[l.name];
  core::Finding f;
  f.kind = core::FindingKind::uninitialized_read;
  f.summary = "rank " + std::to_string(rank) + ": " + opname + " reads " + std::to_string(bytes) +
              " never-written bytes of '" + bname + "' (first at byte " +
              std::to_string(t.byte_offset() + static_cast<int64_t>(undef.front().first)) + ")";
  f.explanation = f.summary +
                  ".\nThose bytes were not written in this lifetime of the buffer (a fresh allocation, or a "
                  "layout gap or padding that nothing initializes); whatever they hold flows into the result.\n"
                  "Fix: write the range before reading it, or read only the tensors' own elements.";
  f.key = "uninit|" + opname + "|" + bname;
  core::ElementDetail d;
  d.tensor = bname;
  d.element = t.byte_offset() + static_cast<int64_t>(undef.front().first);
  d.rank = rank;
  d.note = opname;
  f.detail = d;
  f.seed = options_.seed;
  core::add_finding(findings_, std::move(f));
}

void World::execute_kernel(int rank, int stream, Op& op) {
  const core::KernelCall& k = op.kernel;
  const bool elementwise = core::is_elementwise(k.params);
  // Elementwise kernels propagate undefined elements; all others consume their inputs.
  if (options_.detectors && !elementwise) {
    for (const auto& in : k.reads) check_defined(rank, op.id, in);
  }
  // Element i of an output is defined only when element i of every input is; the inputs are
  // looked at before the outputs overwrite them (in-place kernels).
  std::vector<std::pair<int64_t, int64_t>> elems;
  if (options_.detectors && elementwise) {
    for (const auto& in : k.reads) {
      const int64_t es = core::dtype_bytes(in.dtype);
      for (const auto& [x, y] : undefined_rel(rank, in)) {
        elems.emplace_back(static_cast<int64_t>(x) / es, (static_cast<int64_t>(y) + es - 1) / es);
      }
    }
  }
  for (const auto& in : k.reads) touch(rank, stream, op.id, in, Access::read);
  for (const auto& out : k.writes) touch(rank, stream, op.id, out, Access::write);
  for (const auto& out : k.writes) {
    if (elems.empty()) break;
    const int64_t es = core::dtype_bytes(out.dtype);
    Shadow::Ranges rel;
    for (const auto& [x, y] : elems) {
      rel.emplace_back(static_cast<uint64_t>(x * es), static_cast<uint64_t>(std::min(y, out.numel) * es));
    }
    set_undefined_rel(rank, out, rel);
  }
  WorldMemory mem([&](const core::TensorRef& t) { return host_pointer(rank, t); });
  core::execute_cpu(k, mem);
}

void World::execute_collective(int rank, int stream) {
  const Op& head = ranks_[rank]->streams[stream].queue.front();
  Group& g = groups_[head.group];
  const int64_t k = head.instance;
  Instance inst = g.at(k);  // a copy: the instance is retired below
  const size_t n = g.members.size();
  std::vector<Op*> ops(n);
  for (size_t m = 0; m < n; ++m) {
    ops[m] = &ranks_[g.members[m]]->streams[inst.members[m].stream].queue.front();
    begin(g.members[m], inst.members[m].stream, *ops[m]);
  }
  // Definedness of the inputs, before in-place outputs overwrite them.
  std::vector<Shadow::Ranges> undef(n);
  for (size_t m = 0; m < n; ++m) undef[m] = undefined_rel(g.members[m], ops[m]->coll.input);
  std::vector<std::byte*> in(n), out(n);
  for (size_t m = 0; m < n; ++m) {
    touch(g.members[m], inst.members[m].stream, ops[m]->id, ops[m]->coll.input, Access::read);
    in[m] = host_pointer(g.members[m], ops[m]->coll.input);
    out[m] = host_pointer(g.members[m], ops[m]->coll.output);
  }
  const auto& c = ops[0]->coll;
  const uint64_t in_bytes = static_cast<uint64_t>(c.input.bytes()), out_bytes = static_cast<uint64_t>(c.output.bytes());
  // Outputs are touched before the data moves: a lifetime they begin is poisoned first.
  for (size_t m = 0; m < n; ++m) touch(g.members[m], inst.members[m].stream, ops[m]->id, ops[m]->coll.output, Access::write);
  core::execute_collective_cpu(c, in, out);
  for (size_t m = 0; m < n; ++m) {
    Shadow::Ranges rel;
    for (size_t src = 0; src < n; ++src) {
      for (const auto& [x, y] : undef[src]) {
        switch (c.kind) {
          case core::CollectiveKind::all_gather: rel.emplace_back(src * in_bytes + x, src * in_bytes + y); break;
          case core::CollectiveKind::reduce_scatter: {
            const uint64_t lo = std::max<uint64_t>(x, m * out_bytes), hi = std::min<uint64_t>(y, (m + 1) * out_bytes);
            if (lo < hi) rel.emplace_back(lo - m * out_bytes, hi - m * out_bytes);
            break;
          }
          case core::CollectiveKind::all_reduce: rel.emplace_back(x, y); break;
          case core::CollectiveKind::broadcast:
            if (static_cast<int>(src) == c.root) rel.emplace_back(x, y);
            break;
        }
      }
    }
    set_undefined_rel(g.members[m], ops[m]->coll.output, rel);
  }
  // A completed collective orders every member's earlier work before every member's later work.
  VectorClock joined = ranks_[g.members[0]]->streams[inst.members[0].stream].clock;
  for (size_t m = 1; m < n; ++m) joined.join(ranks_[g.members[m]]->streams[inst.members[m].stream].clock);
  for (size_t m = 0; m < n; ++m) {
    Stream& s = ranks_[g.members[m]]->streams[inst.members[m].stream];
    s.clock = joined;
    finish(g.members[m], inst.members[m].stream, *ops[m]);
  }
  while (!g.instances.empty() && g.first <= k) {
    g.instances.pop_front();
    ++g.first;
  }
}

void World::execute_p2p(int rank, int stream) {
  const Op& head = ranks_[rank]->streams[stream].queue.front();
  const bool send = head.kind == OpKind::send;
  const int from = send ? rank : head.p2p.peer, to = send ? head.p2p.peer : rank;
  Channel& ch = channel(from, to, head.p2p.channel);
  const int64_t k = head.instance;
  const auto pair = ch.at(k);
  Op& s_op = ranks_[from]->streams[pair.first.stream].queue.front();
  Op& r_op = ranks_[to]->streams[pair.second.stream].queue.front();
  begin(from, pair.first.stream, s_op);
  begin(to, pair.second.stream, r_op);
  const Shadow::Ranges undef = undefined_rel(from, s_op.p2p.buffer);
  touch(from, pair.first.stream, s_op.id, s_op.p2p.buffer, Access::read);
  touch(to, pair.second.stream, r_op.id, r_op.p2p.buffer, Access::write);
  std::memmove(host_pointer(to, r_op.p2p.buffer), host_pointer(from, s_op.p2p.buffer), s_op.p2p.buffer.bytes());
  set_undefined_rel(to, r_op.p2p.buffer, undef);
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
  if (op.kind == OpKind::upload) {
    touch(rank, stream, op.id, op.ref, Access::write);
    std::memcpy(host_pointer(rank, op.ref), op.data.data(), op.data.size());
    return;
  }
  if (options_.detectors) check_defined(rank, op.id, op.ref);
  touch(rank, stream, op.id, op.ref, Access::read);
  std::memcpy(op.out.data(), host_pointer(rank, op.ref), op.out.size());
}

void World::execute_free(int rank, int stream, Op& op) {
  const Lifetime& l = lifetimes_[op.lifetime];
  if (options_.detectors) touch_range(rank, stream, op.id, op.lifetime, l.addr, l.addr + l.bytes, Access::free);
  if (options_.reuse == Reuse::earliest) std::memset(ranks_[rank]->heap.bytes(l.addr), 0xff, l.bytes);
}

}  // namespace shardcheck::sim
