// SimRuntime: core::Runtime for one rank of a sim::World. Every call issues into the world
// and every await is a scheduling point: the host program suspends and the world's scheduler
// decides, from the seed, what runs next.
#pragma once

#include "sim/world.hpp"

namespace shardcheck::sim {

class SimRuntime final : public core::Runtime {
 public:
  SimRuntime(World& world, int rank) : world_(world), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_.ranks(); }
  core::StreamId stream(std::string_view name) override { return world_.stream_of(rank_, name); }
  const std::string& stream_name(core::StreamId s) const override { return world_.stream_name(rank_, s); }
  core::EventId create_event(std::string_view name) override;
  core::GroupId group(std::string_view name, std::span<const int> members) override;
  std::span<const int> group_members(core::GroupId g) const override;

  void annotate(core::BufferId b, std::shared_ptr<const core::LogicalMap> map) override {
    world_.annotate(rank_, b, std::move(map));
  }
  uint32_t define_source(std::string_view file, int line) override {
    return world_.define_source(file, line);
  }
  void set_source(uint32_t id) override { world_.set_source(rank_, id); }
  void mark(std::string_view text) override { world_.mark(rank_, text); }
  void set_host_thread(int thread, std::string_view name) override {
    world_.host_thread(rank_, thread, name);
  }
  void host_signal(int signal) override { world_.host_signal(rank_, signal); }
  void host_join(int signal) override { world_.host_join(rank_, signal); }
  bool host_may_continue() override { return false; }
  void park(std::coroutine_handle<> h) override;

 protected:
  core::BufferId do_alloc(int64_t bytes, core::StreamId s, std::string_view name) override {
    return world_.alloc(rank_, bytes, s, name);
  }
  core::BufferId do_alloc_at(int64_t bytes, core::StreamId s, std::string_view name,
                             uint64_t address) override {
    return world_.alloc(rank_, bytes, s, name, address);
  }
  void do_free(core::BufferId b) override { world_.free(rank_, b); }
  void do_record_stream(core::BufferId b, core::StreamId s) override { world_.record_stream(rank_, b, s); }
  void do_record(core::EventId e, core::StreamId s) override;
  void do_wait_event(core::StreamId s, core::EventId e) override;
  void do_wait_stream(core::StreamId waiter, core::StreamId waited) override;
  void do_sync(core::StreamId s) override;
  void do_sync_event(core::EventId e) override;
  void do_sync_device() override;
  void do_launch(core::KernelCall call) override { world_.launch(rank_, std::move(call)); }
  void do_collective(core::CollectiveCall call) override { world_.collective(rank_, std::move(call)); }
  void do_send(core::P2PCall call) override { world_.p2p(rank_, std::move(call), true); }
  void do_recv(core::P2PCall call) override { world_.p2p(rank_, std::move(call), false); }
  void do_upload(core::TensorRef dst, core::StreamId s, std::span<const std::byte> data) override {
    world_.upload(rank_, dst, s, data);
  }
  void do_download(core::TensorRef src, core::StreamId s, std::span<std::byte> out) override {
    world_.download(rank_, src, s, out);
  }

 private:
  World& world_;
  int rank_;
};

}  // namespace shardcheck::sim
