// The scheduler loop: at each step one seeded choice among the runnable host programs and
// stream heads, under the policy of the run (in_order, random, pct, delay_comm).
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/base/cancel.hpp"
#include "core/base/status.hpp"
#include "sim/detector.hpp"
#include "sim/heap.hpp"
#include "sim/runtime.hpp"
#include "sim/world_state.hpp"

namespace shardcheck::sim {

using core::InternalError;

std::string_view to_string(OpKind k) {
  switch (k) {
    case OpKind::kernel:
      return "kernel";
    case OpKind::collective:
      return "collective";
    case OpKind::send:
      return "send";
    case OpKind::recv:
      return "recv";
    case OpKind::record:
      return "record";
    case OpKind::wait:
      return "wait";
    case OpKind::upload:
      return "upload";
    case OpKind::download:
      return "download";
    case OpKind::free_async:
      return "free";
    case OpKind::host_alloc:
      return "alloc";
    case OpKind::host_free:
      return "free";
    case OpKind::host_sync:
      return "sync";
  }
  return "?";
}

World::World(Options options)
    : options_(options),
      rng_(core::Rng(options.seed).split("scheduler")),
      run_queue_(std::clamp(options.ranks, 1, Options::kMaxRanks) * kSlotsPerRank, kSlotsPerRank) {
  if (options_.ranks < 1 || options_.ranks > Options::kMaxRanks) {
    throw InternalError("a simulated world has 1 to " + std::to_string(Options::kMaxRanks) + " ranks");
  }
  participants_ = options_.ranks * (kDenseStride + kExtraStride);
  for (int r = 0; r < options_.ranks; ++r) {
    ranks_.push_back(std::make_unique<Rank>(options_.allocator, options_.reuse, &device_bytes_,
                                            options_.max_device_bytes, options_.values, r,
                                            options_.geometry));
    ranks_.back()->host.clock = VectorClock();  // grows to the components it joins
    ranks_.back()->host.versions.push_back(ranks_.back()->host.clock);
    runtimes_.push_back(std::make_unique<SimRuntime>(*this, r));
  }
  dirty_flag_.assign(static_cast<size_t>(options_.ranks) * kSlotsPerRank, 0);
  intern("");  // name 0: unnamed
  if (options_.detectors) {
    for (const DetectorEntry& e : detector_table()) {
      detectors_.push_back(e.make());
      add_detector(*detectors_.back());
    }
  }
}

World::~World() = default;

void World::add_detector(Detector& detector) {
  const unsigned hooks = detector.hooks();
  for (unsigned h = 0; h < std::size(hooked_); ++h) {
    if (hooks & (1u << h)) hooked_[h].push_back(&detector);
  }
}

core::Runtime& World::runtime(int rank) { return *runtimes_.at(rank); }

const std::string& World::stream_name(int rank, int stream) const {
  return ranks_.at(rank)->streams.at(stream).name;
}

int World::num_streams(int rank) const { return static_cast<int>(ranks_.at(rank)->streams.size()); }

uint32_t World::intern(std::string_view s) {
  auto it = name_ids_.find(s);
  if (it != name_ids_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(names_.size());
  name_hashes_.push_back(core::fnv1a(s));
  name_ids_.emplace(std::string(s), id);
  names_.emplace_back(s);
  return id;
}

uint32_t World::event_op_name(int rank, uint32_t event, bool wait) {
  const std::string_view prefix = wait ? "wait_event '" : "record '";
  const std::string& e = ranks_[rank]->event_names[event];
  lazy_names_.push_back({rank, event, wait});
  lazy_hashes_.push_back(core::fnv1a("'", core::fnv1a(e, core::fnv1a(prefix))));  // of prefix + e + "'"
  return kLazyName + static_cast<uint32_t>(lazy_names_.size() - 1);
}

const std::string& World::lazy_text(uint32_t id) const {
  const auto [it, fresh] = lazy_texts_.try_emplace(id);
  if (fresh) {
    const LazyName& n = lazy_names_.at(id - kLazyName);
    it->second =
        std::string(n.wait ? "wait_event '" : "record '") + ranks_[n.rank]->event_names[n.event] + "'";
  }
  return it->second;
}

void World::set_source(int rank, uint32_t id) {
  if (id != kNone && id >= names_.size()) throw InternalError("set_source of an unknown source");
  ranks_.at(rank)->source = id;
  sources_seen_ |= id != kNone;
}

void World::mark(int rank, std::string_view text) {
  if (options_.record_trace) marks_.push_back({step_, rank, std::string(text)});
}

OpArgs& World::args_of(uint32_t op) {
  if (op_args_.size() <= op) op_args_.resize(static_cast<size_t>(op) + 1);
  return op_args_[op];
}

const std::string& World::group_name(int group) const { return groups_.at(static_cast<size_t>(group)).name; }

uint32_t World::define_source(std::string_view file, int line) {
  const uint32_t id = intern(std::string(file) + ":" + std::to_string(line));
  source_lines_.emplace(id, core::SourceLine{std::string(file), line});
  return id;
}

core::SourceLine World::source_line(uint32_t op) const {
  const auto it = source_lines_.find(op_info_[op].source);
  return it == source_lines_.end() ? core::SourceLine{} : it->second;
}

const std::string& World::source_of(uint32_t op) const {
  const uint32_t s = op_info_[op].source;
  return names_[s == kNone ? 0 : s];
}

std::string World::op_text(uint32_t op) const {
  const OpInfo& info = op_info_[op];
  const std::string& name = this->name(info.name);
  if (info.source == kNone) return name;
  // "kernel 'aten::add_'" -> "aten::add_": a captured operator is named by itself.
  std::string what =
      name.rfind("kernel '", 0) == 0 && name.size() > 9 ? name.substr(8, name.size() - 9) : name;
  // "send '' to 1" -> "send to 1": a captured transfer with no name of its own.
  if ((info.kind == OpKind::send || info.kind == OpKind::recv) && what.find(" '' ") == 4) what.erase(4, 3);
  return what + " at " + names_[info.source];
}

std::string World::group_text(const std::string& group, const std::vector<int>& members) {
  std::string f = group + " [";
  for (size_t i = 0; i < members.size(); ++i) f += (i ? "," : "") + std::to_string(members[i]);
  return f + "]";
}

bool World::is_comm(uint32_t op) const {
  const OpKind k = op_info_[op].kind;
  return k == OpKind::collective || k == OpKind::send || k == OpKind::recv;
}

int World::host_thread_after(int rank, uint32_t op, int except) const {
  const Host& h = ranks_[rank]->host;
  const OpInfo& info = op_info_[op];
  if (!h.threaded || info.stream < 0 || info.exec_step < 0) return -1;
  const uint32_t p = clock_index(rank, info.stream);
  for (int t = 0; t < static_cast<int>(h.thread_clocks.size()); ++t) {
    const VectorClock& c = t == h.thread ? h.clock : h.thread_clocks[static_cast<size_t>(t)];
    if (t != except && c.covers(p, info.epoch)) return t;
  }
  return -1;
}

const std::string& World::host_thread_name(int rank, int thread) const {
  static const std::string kNone;
  const auto& names = ranks_[rank]->host.thread_names;
  return thread >= 0 && thread < static_cast<int>(names.size()) ? names[static_cast<size_t>(thread)] : kNone;
}

std::span<const std::byte> World::read(int rank, core::BufferId buffer) {
  const Lifetime& l = live_buffer(rank, buffer, "read");
  if (!options_.values) throw std::logic_error("a shadow-only run has no bytes behind simulated memory");
  return {lifetime_bytes_[ranks_[rank]->buffers[buffer]], l.bytes};
}

int64_t World::live_bytes(int rank) const {
  int64_t bytes = 0;
  for (const Lifetime& l : lifetimes_) {
    if (l.rank == rank && l.live) bytes += static_cast<int64_t>(l.bytes);
  }
  return bytes;
}

Channel& World::channel(int from, int to, const std::string& name) { return channels_[{from, to, name}]; }

Channel& World::channel_of(int rank, const Op& op) {
  return op.kind == OpKind::send ? channel(rank, op.p2p().peer, op.p2p().channel)
                                 : channel(op.p2p().peer, rank, op.p2p().channel);
}

// An issued send's or recv's channel: made when it was issued.
const Channel& World::channel_of(int rank, const Op& op) const {
  const auto& p = op.p2p();
  return channels_.at(op.kind == OpKind::send ? std::tuple{rank, p.peer, p.channel}
                                              : std::tuple{p.peer, rank, p.channel});
}

bool World::host_ready(int rank) const {
  const Host& h = ranks_[rank]->host;
  if (h.status == Host::Status::done || h.status == Host::Status::running) return false;
  if (h.status == Host::Status::not_started) return true;
  for (uint32_t rec : h.wait_records) {
    if (!records_[rec].executed) return false;
  }
  if (h.wait_stream >= 0 && ranks_[rank]->streams[h.wait_stream].executed <= h.wait_position) return false;
  return true;
}

bool World::stream_ready(int rank, int stream) const {
  const Stream& s = ranks_[rank]->streams[stream];
  if (s.queue.empty()) return false;
  const Op& op = s.queue.front();
  switch (op.kind) {
    case OpKind::wait:
      return op.record == kNone || records_[op.record].executed;
    case OpKind::collective: {
      const Group& g = groups_[op.group];
      // One communicator runs its collectives in issue order, whatever streams they were
      // issued on (as NCCL serializes a communicator's kernels).
      if (op.instance != g.first) return false;
      // The group's oldest unfinished instance: the front one. An issued collective has one.
      if (g.instances.empty()) throw InternalError("an issued collective without its instance");
      const Instance& inst = g.instances.front();
      const bool ready = inst.at_head == static_cast<int>(g.members.size()) && !inst.mismatch;
      if (options_.verify_scheduler) {
        bool visited = inst.issued == static_cast<int>(g.members.size()) && !inst.mismatch;
        for (size_t m = 0; m < g.members.size() && visited; ++m) {
          visited =
              ranks_[g.members[m]]->streams[inst.members[m].stream].executed == inst.members[m].position;
        }
        if (visited != ready) throw InternalError("a collective's arrival count differs from its members");
      }
      return ready;
    }
    case OpKind::send:
    case OpKind::recv: {
      const bool send = op.kind == OpKind::send;
      const Channel& ch = channel_of(rank, op);
      const auto& pair = ch.at(op.instance);
      const auto& other = send ? pair.second : pair.first;
      if (!other.issued || pair.first.bytes != pair.second.bytes) return false;
      return ranks_[op.p2p().peer]->streams[other.stream].executed == other.position;
    }
    default:
      return true;
  }
}

int World::pick() {
  auto participant_at = [&](int sl) {
    const int rank = sl / kSlotsPerRank, stream = sl % kSlotsPerRank - 1;
    return stream < 0 ? host_participant(rank) : participant(rank, stream);
  };
  const RunQueue& q = run_queue_;
  switch (options_.policy) {
    case Policy::in_order: {
      const int first = q.first_stream();  // drain streams first: every launch "blocks"
      return participant_at(first != RunQueue::kNone ? first : q.kth(0));
    }
    case Policy::random:
      return participant_at(q.kth(static_cast<int>(rng_.uniform(static_cast<uint64_t>(q.count())))));
    case Policy::delay_comm: {
      if (q.eager_count() == 0)
        return participant_at(q.kth(static_cast<int>(rng_.uniform(static_cast<uint64_t>(q.count())))));
      return participant_at(
          q.kth_eager(static_cast<int>(rng_.uniform(static_cast<uint64_t>(q.eager_count())))));
    }
    case Policy::pct:
      return participant_at(q.best());
  }
  return participant_at(q.kth(0));
}

void World::mark_rank(int rank) {
  mark(rank, -1);
  for (int s = 0; s < static_cast<int>(ranks_[rank]->streams.size()); ++s) mark(rank, s);
}

void World::refresh(int sl) {
  dirty_flag_[static_cast<size_t>(sl)] = 0;
  const bool pct = options_.policy == Policy::pct;
  const int rank = sl / kSlotsPerRank, s = sl % kSlotsPerRank - 1;
  if (s < 0) {
    run_queue_.stage(sl, {host_ready(rank), true, false, pct ? pct_priority_[host_participant(rank)] : 0});
    return;
  }
  const Stream& stream = ranks_[rank]->streams[s];
  // An empty stream is never ready (stream_ready says so too): checked before the call.
  const bool ready = !stream.queue.empty() && stream_ready(rank, s);
  run_queue_.stage(sl, {ready, !stream.comm, true, pct ? pct_priority_[participant(rank, s)] : 0});
}

void World::arrived(int rank, int stream) {
  mark(rank, stream);
  const Stream& s = ranks_[rank]->streams[stream];
  const Op& op = s.queue.front();
  if (op.kind == OpKind::collective) {
    Group& g = groups_[op.group];
    Instance& inst = g.at(op.instance);
    // Once every member has it at its head, each of them may run it (if the group is there).
    if (++inst.at_head == static_cast<int>(g.members.size())) {
      for (size_t m = 0; m < g.members.size(); ++m) mark(g.members[m], inst.members[m].stream);
    }
  } else if (op.kind == OpKind::send || op.kind == OpKind::recv) {
    mark_rank(op.p2p().peer);
  }
}

void World::verify_runnable() {
  for (int r = 0; r < ranks(); ++r) {
    bool same = run_queue_.get(slot(r, -1)).present == host_ready(r);
    const std::vector<Stream>& streams = ranks_[r]->streams;
    for (int s = 0; s < static_cast<int>(streams.size()); ++s)
      same = same && run_queue_.get(slot(r, s)).present == (!streams[s].queue.empty() && stream_ready(r, s));
    if (!same) {
      throw InternalError("step " + std::to_string(step_) + ": the runnable set of rank " +
                          std::to_string(r) + " differs from a scan of the world");
    }
  }
}

void World::step_host(int rank) {
  Host& h = ranks_[rank]->host;
  if (!h.wait_records.empty()) {
    for (uint32_t rec : h.wait_records) h.clock.join(records_[rec].clock);
    h.versions.push_back(h.clock);
    h.wait_records.clear();
  }
  h.wait_stream = -1;
  const bool first = h.status == Host::Status::not_started;
  h.status = Host::Status::running;  // until it parks again or finishes
  if (first) {
    h.task.start();
  } else {
    std::exchange(h.parked, {}).resume();
  }
  if (h.task.done()) {
    h.status = Host::Status::done;
    try {
      h.task.take();  // a host program's exception ends the run as an internal error
    } catch (const ResourceError& ex) {
      throw ResourceError("rank " + std::to_string(rank) + ": " + ex.what());  // still the limit
    } catch (const core::Cancelled&) {
      throw;  // the oracle, inside a host program, polled a raised flag: the run stops
    } catch (const std::exception& ex) {
      throw InternalError("rank " + std::to_string(rank) + ": " + ex.what());
    }
  }
}

void World::step_stream(int rank, int stream) {
  Stream& s = ranks_[rank]->streams[stream];
  Op& op = s.queue.front();
  switch (op.kind) {
    case OpKind::collective:
      execute_collective(rank, stream);
      return;
    case OpKind::send:
    case OpKind::recv:
      execute_p2p(rank, stream);
      return;
    default:
      break;
  }
  begin(rank, stream, op);
  switch (op.kind) {
    case OpKind::kernel:
      execute_kernel(rank, stream, op);
      break;
    case OpKind::record: {
      Record& rec = records_[op.record];
      rec.clock = s.clock;
      rec.executed = true;
      mark_rank(rank);  // a head of another stream, or the host, may wait on it
      break;
    }
    case OpKind::upload:
    case OpKind::download:
      execute_transfer(rank, stream, op);
      break;
    case OpKind::free_async:
      execute_free(rank, stream, op);
      break;
    default:
      break;
  }
  finish(rank, stream, op);
}

// PCT's priorities: one per participant, drawn from the seed, and its change points.
void World::seed_pct() {
  const int d = std::max(1, options_.pct_depth);
  for (int e = 0; e < dense_participants(); ++e)
    pct_priority_.push_back(d + static_cast<int64_t>(rng_.uniform(1u << 30)));
  const int64_t hint = options_.pct_steps_hint > 0 ? options_.pct_steps_hint : 10000;
  for (int i = 0; i < d - 1; ++i) pct_change_steps_.push_back(1 + static_cast<int64_t>(rng_.uniform(hint)));
  std::sort(pct_change_steps_.begin(), pct_change_steps_.end());
  // Streams past the dense ones draw from their own stream of the seed, so the scheduler's
  // draws, and every schedule of a program with fewer streams, stay as they were.
  core::Rng extra = rng_.split("streams past the dense ones");
  for (int e = dense_participants(); e < participants_; ++e)
    pct_priority_.push_back(d + static_cast<int64_t>(extra.uniform(1u << 30)));
}

// PCT: at each change point the entity that ran last drops below every initial priority.
void World::pct_demote(int last, size_t& next_change) {
  while (next_change < pct_change_steps_.size() && pct_change_steps_[next_change] <= step_) {
    if (last >= 0) {
      pct_priority_[last] = static_cast<int64_t>(pct_change_steps_.size() - next_change) - 1;
      const auto [lr, ls] = rank_stream(last);
      RunQueue::Entry e = run_queue_.get(slot(lr, ls));
      e.priority = pct_priority_[last];
      run_queue_.set(slot(lr, ls), e);
    }
    ++next_change;
  }
}

// Steps the scheduler until nothing can run; false when the run was cancelled between steps.
bool World::schedule() {
  int last = -1;
  size_t next_change = 0;
  while (true) {
    if (step_ >= options_.max_steps) {
      throw ResourceError("the run exceeded its bound of " + std::to_string(options_.max_steps) +
                          " scheduler steps");
    }
    // A cancelled run ends here, between steps, where the world is consistent.
    if ((step_ & 4095) == 0 && options_.cancel && options_.cancel->load(std::memory_order_relaxed))
      return false;
    for (int sl : dirty_) refresh(sl);
    dirty_.clear();
    run_queue_.commit();
    if (options_.verify_scheduler) verify_runnable();
    if (run_queue_.count() == 0) return true;
    pct_demote(last, next_change);
    const int e = pick();
    last = e;
    ++step_;
    const auto [rank, stream] = rank_stream(e);
    // What ran, and its rank's host: a stream step may release the host waiting on it.
    mark(rank, -1);
    if (stream >= 0) mark(rank, stream);
    if (stream < 0) {
      step_host(rank);
    } else {
      step_stream(rank, stream);
    }
  }
}

// The end of a run: whether every rank finished, the detectors that look at the end state, and
// what the run counted.
void World::end_run(RunResult& result) {
  bool done = result.error.empty();
  for (int r = 0; r < ranks() && done; ++r) {
    done = ranks_[r]->host.status == Host::Status::done;
    for (const auto& s : ranks_[r]->streams) done = done && s.queue.empty();
  }
  // A cancelled run stopped with work left: that is not a deadlock.
  const RunEnd end{done, result.error.empty() && !result.cancelled};
  notify(Detector::on_end, [&](Detector& d, const WorldView& view) { d.end(view, end, findings_); });
  result.completed = done;
  result.findings = findings_.items();
  result.trace_digest = digest_;
  result.steps = step_;
  result.ops_executed = ops_executed_;
  result.collectives = collectives_;
  result.bytes_checked = bytes_checked_;
}

RunResult World::run(const std::function<core::Task<>(core::Runtime&)>& body) {
  RunResult result;
  if (step_ != 0) throw InternalError("a World runs once");
  for (int r = 0; r < ranks(); ++r) ranks_[r]->host.task = body(*runtimes_[r]);
  if (options_.policy == Policy::pct) seed_pct();
  for (int r = 0; r < ranks(); ++r) mark_rank(r);
  try {
    result.cancelled = !schedule();
  } catch (const ResourceError& ex) {
    result.error = ex.what();
    result.limit = true;
  } catch (const core::Cancelled&) {
    // A long operation (a kernel over a large buffer, the oracle's reads) polled the flag and
    // stopped midway: the run is partial, as when it stops between steps.
    result.cancelled = true;
  } catch (const std::exception& ex) {
    result.error = ex.what();
  }
  end_run(result);
  return result;
}

}  // namespace shardcheck::sim
