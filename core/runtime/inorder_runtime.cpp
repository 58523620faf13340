// InOrderRuntime: immediate execution, rendezvous for collectives and p2p.
#include "core/runtime/inorder_runtime.hpp"

#include <algorithm>
#include <cstring>

#include "core/runtime/collectives_cpu.hpp"

namespace shardcheck::core {

namespace {
// Fresh memory reads as NaN in every float dtype, so a read of unwritten bytes shows.
constexpr std::byte kPoison{0xff};

class RankMemory final : public MemoryView {
 public:
  explicit RankMemory(InOrderRuntime& rt) : rt_(rt) {}
  std::byte* data(const TensorRef& t) override {
    auto& m = rt_.memory(t.buffer);
    if (t.byte_offset() < 0 || t.byte_offset() + t.bytes() > static_cast<int64_t>(m.size())) {
      throw InternalError("access past the end of buffer " + std::to_string(t.buffer));
    }
    return m.data() + t.byte_offset();
  }

 private:
  InOrderRuntime& rt_;
};
}  // namespace

int InOrderRuntime::world_size() const { return world_.size(); }

StreamId InOrderRuntime::stream(std::string_view name) {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i] == name) return static_cast<StreamId>(i);
  }
  streams_.emplace_back(name);
  return static_cast<StreamId>(streams_.size() - 1);
}

GroupId InOrderRuntime::group(std::string_view name, std::span<const int> members) {
  if (std::find(members.begin(), members.end(), rank_) == members.end()) {
    throw InternalError("group '" + std::string(name) + "' does not contain rank " + std::to_string(rank_));
  }
  group_keys_.push_back(world_.intern_group(name, members));
  return static_cast<GroupId>(group_keys_.size() - 1);
}

std::span<const int> InOrderRuntime::group_members(GroupId g) const {
  return world_.groups_.at(group_keys_.at(g)).second;
}

std::vector<std::byte>& InOrderRuntime::memory(BufferId b) {
  auto it = memory_.find(b);
  if (it == memory_.end()) throw InternalError("buffer " + std::to_string(b) + " is not live");
  return it->second;
}

std::byte* InOrderRuntime::address(const TensorRef& t) {
  RankMemory m(*this);
  return m.data(t);
}

BufferId InOrderRuntime::do_alloc(int64_t bytes, StreamId, std::string_view) {
  memory_[next_buffer_].assign(static_cast<size_t>(bytes), kPoison);
  return next_buffer_++;
}

void InOrderRuntime::do_free(BufferId buffer) {
  if (!memory_.erase(buffer)) throw InternalError("free of a buffer that is not live");
}

void InOrderRuntime::do_launch(KernelCall call) {
  world_.cancel.poll();
  RankMemory m(*this);
  m.cancel = world_.cancel;
  execute_cpu(call, m);
}

void InOrderRuntime::do_collective(CollectiveCall call) {
  if (!call.input_parts.empty() || !call.output_parts.empty())
    throw InternalError(op_name(call) + ": the list forms of collectives run on the simulator only");
  blocked_ = true;
  world_.arrive(group_keys_.at(call.group), rank_, call);
}

void InOrderRuntime::do_send(P2PCall call) {
  blocked_ = true;
  world_.p2p_.push_back({rank_, call.peer, call.buffer, true, call.channel});
}

void InOrderRuntime::do_recv(P2PCall call) {
  blocked_ = true;
  world_.p2p_.push_back({call.peer, rank_, call.buffer, false, call.channel});
}

void InOrderRuntime::do_upload(TensorRef dst, StreamId, std::span<const std::byte> data) {
  if (static_cast<int64_t>(data.size()) != dst.bytes()) throw InternalError("upload size mismatch");
  std::memcpy(address(dst), data.data(), data.size());
}

void InOrderRuntime::do_download(TensorRef src, StreamId, std::span<std::byte> out) {
  if (static_cast<int64_t>(out.size()) != src.bytes()) throw InternalError("download size mismatch");
  std::memcpy(out.data(), address(src), out.size());
}

InOrderWorld::InOrderWorld(int ranks) {
  for (int r = 0; r < ranks; ++r) ranks_.push_back(std::make_unique<InOrderRuntime>(*this, r));
}

int InOrderWorld::intern_group(std::string_view name, std::span<const int> members) {
  std::vector<int> m(members.begin(), members.end());
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (groups_[i].first == name && groups_[i].second == m) return static_cast<int>(i);
  }
  groups_.emplace_back(std::string(name), std::move(m));
  return static_cast<int>(groups_.size() - 1);
}

void InOrderWorld::arrive(int group, int rank, const CollectiveCall& call) {
  Pending& p = pending_[group];
  p.ranks.push_back(rank);
  p.calls.push_back(call);
  if (p.ranks.size() == groups_[group].second.size()) {
    complete(p, group);
    pending_.erase(group);
  }
}

void InOrderWorld::complete(Pending& p, int group) {
  const std::vector<int>& members = groups_[group].second;
  std::vector<std::byte*> in(members.size()), out(members.size());
  for (size_t i = 0; i < p.ranks.size(); ++i) {
    const size_t g = std::find(members.begin(), members.end(), p.ranks[i]) - members.begin();
    in[g] = ranks_[p.ranks[i]]->address(p.calls[i].input);
    out[g] = ranks_[p.ranks[i]]->address(p.calls[i].output);
  }
  // Every member must have issued the same kind of collective; this runtime checks nothing
  // more (the simulator's detectors do).
  execute_collective_cpu(p.calls[0], in, out);
  for (int r : p.ranks) ranks_[r]->blocked_ = false;
}

void InOrderWorld::run(const std::function<Task<>(Runtime&)>& body) {
  std::vector<Task<>> tasks;
  for (auto& r : ranks_) tasks.push_back(body(*r));
  for (auto& t : tasks) t.start();
  for (int idle_rounds = 0;;) {
    // Match p2p pairs: the first send from a to b meets the first recv of b from a.
    for (size_t i = 0; i < p2p_.size(); ++i) {
      for (size_t j = i + 1; j < p2p_.size(); ++j) {
        if (p2p_[i].from != p2p_[j].from || p2p_[i].to != p2p_[j].to || p2p_[i].channel != p2p_[j].channel ||
            p2p_[i].is_send == p2p_[j].is_send) {
          continue;
        }
        const P2P& s = p2p_[i].is_send ? p2p_[i] : p2p_[j];
        const P2P& r = p2p_[i].is_send ? p2p_[j] : p2p_[i];
        std::memcpy(ranks_[r.to]->address(r.buffer), ranks_[s.from]->address(s.buffer), s.buffer.bytes());
        ranks_[s.from]->blocked_ = ranks_[r.to]->blocked_ = false;
        p2p_.erase(p2p_.begin() + j);
        p2p_.erase(p2p_.begin() + i);
        i = static_cast<size_t>(-1);
        break;
      }
    }
    bool progressed = false, all_done = true;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (tasks[r].done()) continue;
      all_done = false;
      auto& rt = *ranks_[r];
      if (rt.blocked_ || !rt.parked_) continue;
      auto h = std::exchange(rt.parked_, {});
      h.resume();
      progressed = true;
    }
    for (auto& t : tasks) {
      if (t.done()) t.take();  // rethrows a rank's exception
    }
    if (all_done) return;
    idle_rounds = progressed ? 0 : idle_rounds + 1;
    if (idle_rounds > 1) throw InternalError("in-order runtime: every rank is waiting (a hang)");
  }
}

}  // namespace shardcheck::core
