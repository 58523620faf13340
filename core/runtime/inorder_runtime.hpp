// A trivial Runtime for core's own tests: every operation runs at the moment it is issued,
// streams and events order nothing (there is no concurrency to order), and a collective or
// p2p call parks its rank until every peer has issued it. Ranks take turns round-robin.
// The simulator in sim/ is the real implementation; this one exists so core can be tested
// without it.
//   InOrderWorld world(2);
//   world.run([&](Runtime& rt) -> Task<> { ... });   // same body on every rank
//   world.bytes(0, buffer)                             // rank 0's memory afterwards
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/base/cancel.hpp"
#include "core/runtime/runtime.hpp"

namespace shardcheck::core {

class InOrderWorld;

class InOrderRuntime final : public Runtime {
 public:
  InOrderRuntime(InOrderWorld& world, int rank) : world_(world), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override;
  StreamId stream(std::string_view name) override;
  const std::string& stream_name(StreamId s) const override { return streams_.at(s); }
  EventId create_event(std::string_view) override { return next_event_++; }
  GroupId group(std::string_view name, std::span<const int> members) override;
  std::span<const int> group_members(GroupId g) const override;

  bool host_may_continue() override { return !blocked_; }
  void park(std::coroutine_handle<> h) override { parked_ = h; }

  std::vector<std::byte>& memory(BufferId b);
  bool live(BufferId b) const { return memory_.count(b) != 0; }

 protected:
  BufferId do_alloc(int64_t bytes, StreamId stream, std::string_view name) override;
  void do_free(BufferId buffer) override;
  void do_record_stream(BufferId, StreamId) override {}
  void do_record(EventId, StreamId) override {}
  void do_wait_event(StreamId, EventId) override {}
  void do_wait_stream(StreamId, StreamId) override {}
  void do_sync(StreamId) override {}
  void do_sync_event(EventId) override {}
  void do_sync_device() override {}
  void do_launch(KernelCall call) override;
  void do_collective(CollectiveCall call) override;
  void do_send(P2PCall call) override;
  void do_recv(P2PCall call) override;
  void do_upload(TensorRef dst, StreamId stream, std::span<const std::byte> data) override;
  void do_download(TensorRef src, StreamId stream, std::span<std::byte> out) override;

 private:
  friend class InOrderWorld;
  std::byte* address(const TensorRef& t);

  InOrderWorld& world_;
  int rank_;
  std::vector<std::string> streams_;
  std::vector<int> group_keys_;  // GroupId -> world group index
  std::map<BufferId, std::vector<std::byte>> memory_;
  BufferId next_buffer_ = 0;
  EventId next_event_ = 0;
  bool blocked_ = false;
  std::coroutine_handle<> parked_;
};

class InOrderWorld {
 public:
  explicit InOrderWorld(int ranks);
  InOrderRuntime& rank(int r) { return *ranks_.at(r); }
  int size() const { return static_cast<int>(ranks_.size()); }

  // Runs body(rank's runtime) on every rank to completion. Throws InternalError on a hang
  // (every rank parked) and rethrows the first exception a rank threw.
  void run(const std::function<Task<>(Runtime&)>& body);

  // Polled before every kernel and handed to it (MemoryView::cancel): a raised flag stops the
  // run with core::Cancelled.
  CancelToken cancel;

 private:
  friend class InOrderRuntime;
  struct Pending {  // a collective or p2p call waiting for its peers
    std::vector<int> ranks;
    std::vector<CollectiveCall> calls;
  };
  int intern_group(std::string_view name, std::span<const int> members);
  void arrive(int group, int rank, const CollectiveCall& call);
  void complete(Pending& p, int group);

  std::vector<std::unique_ptr<InOrderRuntime>> ranks_;
  std::vector<std::pair<std::string, std::vector<int>>> groups_;
  std::map<int, Pending> pending_;  // by world group index
  struct P2P {
    int from, to;
    TensorRef buffer;
    bool is_send;
    std::string channel;
  };
  std::vector<P2P> p2p_;
};

}  // namespace shardcheck::core
