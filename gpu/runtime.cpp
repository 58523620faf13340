// GpuRuntime: the issue side of the CUDA backend, one per rank.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/base/status.hpp"
#include "gpu/check.hpp"
#include "gpu/local_comm.hpp"
#include "gpu/nccl_check.hpp"
#include "gpu/runtime_state.hpp"

namespace shardcheck::gpu {

using core::InternalError;

namespace {

class RankMemory final : public DeviceMemory {
 public:
  explicit RankMemory(RankState& r) : r_(r) {}
  void* ptr(const core::TensorRef& t) override {
    if (t.buffer < 0 || t.buffer >= static_cast<int>(r_.buffers.size()) || !r_.buffers[t.buffer].live) {
      throw InternalError("GPU rank " + std::to_string(r_.rank) + ": access to a buffer that is not live");
    }
    const Buffer& b = r_.buffers[t.buffer];
    if (t.byte_offset() < 0 || t.byte_offset() + t.bytes() > b.bytes) {
      throw InternalError("GPU rank " + std::to_string(r_.rank) + ": access past the end of '" + b.name +
                          "'");
    }
    return static_cast<std::byte*>(b.ptr) + t.byte_offset();
  }

 private:
  RankState& r_;
};

}  // namespace

class GpuRuntime final : public core::Runtime {
 public:
  GpuRuntime(GpuWorld::Impl& w, RankState& r) : w_(w), r_(r) {}

  int rank() const override { return r_.rank; }
  int world_size() const override { return w_.world_size; }

  core::StreamId stream(std::string_view name) override {
    for (size_t i = 0; i < r_.streams.size(); ++i) {
      if (r_.streams[i].first == name) return static_cast<core::StreamId>(i);
    }
    cudaStream_t s;
    SC_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    r_.streams.emplace_back(std::string(name), s);
    return static_cast<core::StreamId>(r_.streams.size() - 1);
  }
  const std::string& stream_name(core::StreamId s) const override { return r_.streams.at(s).first; }

  core::EventId create_event(std::string_view name) override {
    cudaEvent_t e;
    SC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    r_.events.push_back(e);
    r_.event_names.emplace_back(name);
    return static_cast<core::EventId>(r_.events.size() - 1);
  }

  core::GroupId group(std::string_view name, std::span<const int> members) override {
    r_.groups.push_back(w_.group_index(r_.rank, name, members));
    return static_cast<core::GroupId>(r_.groups.size() - 1);
  }
  std::span<const int> group_members(core::GroupId g) const override {
    return w_.groups.at(r_.groups.at(g)).members;
  }

  bool host_may_continue() override {
    return r_.waits.empty() && r_.rendezvous_group < 0 && r_.rendezvous_pair < 0;
  }
  void park(std::coroutine_handle<> h) override {
    r_.parked = h;
    r_.status = RankState::Status::parked;
  }

 protected:
  cudaStream_t cuda(core::StreamId s) const {
    if (s < 0 || s >= static_cast<int>(r_.streams.size())) throw InternalError("unknown stream");
    return r_.streams[s].second;
  }
  Buffer& live(core::BufferId b, const char* use) {
    if (b < 0 || b >= static_cast<int>(r_.buffers.size()) || !r_.buffers[b].live) {
      throw InternalError(std::string(use) + " of a buffer that is not live");
    }
    return r_.buffers[b];
  }
  cudaEvent_t sync_event() {
    if (!r_.idle_sync_events.empty()) {
      cudaEvent_t e = r_.idle_sync_events.back();
      r_.idle_sync_events.pop_back();
      return e;
    }
    cudaEvent_t e;
    SC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    r_.all_sync_events.push_back(e);
    return e;
  }
  void host_waits_for(core::StreamId s) {
    cudaEvent_t e = sync_event();
    SC_CUDA_CHECK(cudaEventRecord(e, cuda(s)));
    if (w_.holds) w_.holds->record(r_.rank, s, e, "'" + stream_name(s) + "'");
    r_.waits.emplace_back(e, true);
  }
  // Forced replay: counts the operation and holds it when it is a held access (before it is
  // enqueued); returns the holds it is the second access of, to release after it.
  template <class Name>
  std::vector<int> hold_point(core::StreamId s, Name&& name) {
    if (!w_.holds) return {};
    const std::string n = name();
    w_.holds->before(r_.rank, s, stream_name(s), n, cuda(s));
    return w_.holds->second_accesses(r_.rank, s, stream_name(s), n);
  }
  void release_after(const std::vector<int>& holds, core::StreamId s) {
    for (int h : holds) w_.holds->release_after(h, cuda(s));
  }
  // GpuOptions::serial: the device finishes what was issued before the host goes on.
  void settle() {
    if (w_.options.serial) SC_CUDA_CHECK(cudaDeviceSynchronize());
  }

  core::BufferId do_alloc(int64_t bytes, core::StreamId s, std::string_view name) override {
    Buffer b;
    void* prefer = w_.holds ? w_.holds->handoff(r_.rank, std::string(name)) : nullptr;
    b.ptr = r_.allocator->allocate(bytes, s, cuda(s), prefer);
    b.bytes = bytes;
    b.stream = s;
    b.name = std::string(name);
    r_.buffers.push_back(std::move(b));
    return static_cast<core::BufferId>(r_.buffers.size() - 1);
  }
  void do_free(core::BufferId id) override {
    Buffer& b = live(id, "free");
    std::vector<cudaStream_t> recorded;
    for (int s : b.recorded) recorded.push_back(cuda(s));
    r_.allocator->release(b.ptr, recorded, cuda(b.stream));
    if (w_.holds) w_.holds->freed(r_.rank, b.name, b.ptr);
    b.live = false;
  }
  void do_record_stream(core::BufferId id, core::StreamId s) override {
    Buffer& b = live(id, "record_stream");
    if (s != b.stream && std::find(b.recorded.begin(), b.recorded.end(), s) == b.recorded.end())
      b.recorded.push_back(s);
  }
  void do_record(core::EventId e, core::StreamId s) override {
    SC_CUDA_CHECK(cudaEventRecord(r_.events.at(e), cuda(s)));
    if (w_.holds)
      w_.holds->record(r_.rank, s, r_.events.at(e),
                       "event '" + r_.event_names.at(e) + "' on '" + stream_name(s) + "'");
  }
  void do_wait_event(core::StreamId s, core::EventId e) override {
    SC_CUDA_CHECK(cudaStreamWaitEvent(cuda(s), r_.events.at(e), 0));
    if (w_.holds)
      w_.holds->wait(r_.rank, s, r_.events.at(e),
                     "'" + stream_name(s) + "' waits for event '" + r_.event_names.at(e) + "'");
  }
  void do_wait_stream(core::StreamId waiter, core::StreamId waited) override {
    SC_CUDA_CHECK(cudaEventRecord(r_.scratch, cuda(waited)));
    SC_CUDA_CHECK(cudaStreamWaitEvent(cuda(waiter), r_.scratch, 0));
    if (w_.holds) {
      w_.holds->record(r_.rank, waited, r_.scratch, "");
      w_.holds->wait(r_.rank, waiter, r_.scratch,
                     "'" + stream_name(waiter) + "' waits for '" + stream_name(waited) + "'");
    }
  }
  void do_sync(core::StreamId s) override { host_waits_for(s); }
  void do_sync_event(core::EventId e) override { r_.waits.emplace_back(r_.events.at(e), false); }
  void do_sync_device() override {
    for (size_t s = 0; s < r_.streams.size(); ++s) host_waits_for(static_cast<core::StreamId>(s));
  }
  void do_launch(core::KernelCall call) override {
    const std::vector<int> releases = hold_point(call.stream, [&] { return core::op_name(call); });
    amplify(call.stream, false, [&] { return core::op_name(call); });
    launch_kernel(call);
    release_after(releases, call.stream);
    settle();
  }
  void launch_kernel(const core::KernelCall& call) {
    RankMemory mem(r_);
    if (!w_.options.profile_kernels) {
      gpu::launch(call, mem, cuda(call.stream), *r_.blas);
      return;
    }
    RankState::KernelSample sample{nullptr, nullptr, call.name, 0, std::nullopt};
    if (const auto* g = std::get_if<core::kernel::Gemm>(&call.params)) {
      sample.gemm = *g;
      sample.a = call.reads[0].dtype;
      sample.b = call.reads[1].dtype;
      sample.c = call.writes[0].dtype;
    }
    SC_CUDA_CHECK(cudaEventCreate(&sample.start));
    SC_CUDA_CHECK(cudaEventCreate(&sample.stop));
    SC_CUDA_CHECK(cudaEventRecord(sample.start, cuda(call.stream)));
    const auto t0 = std::chrono::steady_clock::now();
    gpu::launch(call, mem, cuda(call.stream), *r_.blas);
    sample.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    SC_CUDA_CHECK(cudaEventRecord(sample.stop, cuda(call.stream)));
    r_.kernel_samples.push_back(std::move(sample));
  }
  void do_collective(core::CollectiveCall call) override;
  void do_send(core::P2PCall call) override { p2p(std::move(call), true); }
  void do_recv(core::P2PCall call) override { p2p(std::move(call), false); }
  void do_upload(core::TensorRef dst, core::StreamId s, std::span<const std::byte> data) override {
    RankMemory mem(r_);
    std::vector<std::byte> copy(data.begin(), data.end());
    SC_CUDA_CHECK(cudaMemcpyAsync(mem.ptr(dst), copy.data(), copy.size(), cudaMemcpyHostToDevice, cuda(s)));
    cudaEvent_t e = sync_event();
    SC_CUDA_CHECK(cudaEventRecord(e, cuda(s)));
    r_.uploads.emplace_back(e, std::move(copy));  // kept until the copy has run
    settle();
  }
  void do_download(core::TensorRef src, core::StreamId s, std::span<std::byte> out) override {
    RankMemory mem(r_);
    SC_CUDA_CHECK(cudaMemcpyAsync(out.data(), mem.ptr(src), out.size(), cudaMemcpyDeviceToHost, cuda(s)));
    host_waits_for(s);
  }

 private:
  void p2p(core::P2PCall call, bool send);

  // --amplify: a spin on stream s before this operation when it is one to delay. `name`
  // gives the operation's core::op_name, built only when a delay site could match.
  template <class Name>
  void amplify(core::StreamId s, bool collective, Name&& name) {
    const GpuOptions& o = w_.options;
    if (o.amplify_cycles <= 0) return;
    bool hit = o.amplify_at == AmplifyAt::collectives && collective;
    if (o.amplify_at == AmplifyAt::sites) {
      std::optional<std::string> n;
      for (const DelaySite& d : o.delay_sites) {
        if (d.rank != r_.rank || d.stream != stream_name(s)) continue;
        if (!n) n = name();
        hit |= d.op == *n;
      }
    }
    if (!hit) return;
    launch_spin(o.amplify_cycles, cuda(s));
    ++r_.delays;
  }

  GpuWorld::Impl& w_;
  RankState& r_;
};

void GpuRuntime::do_collective(core::CollectiveCall call) {
  const int gi = r_.groups.at(call.group);
  Group& g = w_.groups[gi];
  if (core::Status e = core::check_collective_shape(call, static_cast<int>(g.members.size())); !e)
    throw InternalError(e.message());
  // Captured programs' collectives and reductions (docs/capture-format.md) run on the simulator only.
  if (call.kind > core::CollectiveKind::broadcast || call.reduce > core::ReduceOp::avg ||
      !call.input_parts.empty() || !call.output_parts.empty())
    throw InternalError(core::op_name(call) +
                        ": the GPU backend runs all_gather, reduce_scatter, all_reduce "
                        "and broadcast with sum or avg only, none of them in the list forms");
  if (w_.options.record_collectives) {
    r_.collectives.push_back({call.kind, call.input.dtype, call.reduce, call.input.numel, call.output.numel,
                              static_cast<int>(g.members.size()), g.name});
  }
  if (w_.options.skip_communication) return;
  const cudaStream_t s = cuda(call.stream);
  std::vector<int> releases = hold_point(call.stream, [&] { return core::op_name(call); });
  // --amplify: the communication stream runs late, so a missing ordering corrupts values.
  amplify(call.stream, true, [&] { return core::op_name(call); });
  const int mi = static_cast<int>(std::find(g.members.begin(), g.members.end(), r_.rank) - g.members.begin());
  if (w_.options.comm == CommMode::nccl) {
    RankMemory mem(r_);
    ncclComm_t comm = g.comms.at(mi);
    const ncclDataType_t t = nccl_type(call.input.dtype);
    const ncclRedOp_t op = call.reduce == core::ReduceOp::avg ? ncclAvg : ncclSum;
    void* in = mem.ptr(call.input);
    void* out = mem.ptr(call.output);
    switch (call.kind) {
      case core::CollectiveKind::all_gather:
        SC_NCCL_CHECK(ncclAllGather(in, out, call.input.numel, t, comm, s));
        break;
      case core::CollectiveKind::reduce_scatter:
        SC_NCCL_CHECK(ncclReduceScatter(in, out, call.output.numel, t, op, comm, s));
        break;
      case core::CollectiveKind::all_reduce:
        SC_NCCL_CHECK(ncclAllReduce(in, out, call.output.numel, t, op, comm, s));
        break;
      case core::CollectiveKind::broadcast:
        SC_NCCL_CHECK(ncclBroadcast(in, out, call.output.numel, t, call.root, comm, s));
        break;
      case core::CollectiveKind::reduce:
      case core::CollectiveKind::all_to_all:
      case core::CollectiveKind::barrier:
        break;  // refused above
    }
    release_after(releases, call.stream);
    settle();
    return;
  }
  const int64_t k = g.issued[mi]++;
  Instance& inst = g.instances[k];
  if (inst.members.empty()) inst.members.resize(g.members.size());
  Arrival a{r_.rank, call.stream, std::move(call), sync_event(), std::move(releases)};
  SC_CUDA_CHECK(cudaEventRecord(a.ready, s));
  if (w_.holds) w_.holds->record(r_.rank, a.stream, a.ready, "");
  inst.members[mi] = std::move(a);
  r_.rendezvous_group = gi;
  r_.rendezvous_instance = k;
  if (++inst.arrived == static_cast<int>(g.members.size())) {
    w_.launch_collective(g, k);
    settle();
  }
}

void GpuRuntime::p2p(core::P2PCall call, bool send) {
  if (call.peer < 0 || call.peer >= world_size() || call.peer == r_.rank)
    throw InternalError("p2p with an invalid peer");
  if (w_.options.skip_communication) return;
  const cudaStream_t s = cuda(call.stream);
  std::vector<int> releases = hold_point(call.stream, [&] { return core::op_name(call, send); });
  amplify(call.stream, false, [&] { return core::op_name(call, send); });
  const auto key =
      send ? std::tuple{r_.rank, call.peer, call.channel} : std::tuple{call.peer, r_.rank, call.channel};
  if (w_.options.comm == CommMode::nccl) {
    RankMemory mem(r_);
    const int gi =
        w_.group_index(r_.rank, "p2p:" + call.channel,
                       send ? std::vector<int>{r_.rank, call.peer} : std::vector<int>{call.peer, r_.rank});
    Group& g = w_.groups[gi];
    const int mi = send ? 0 : 1;
    if (send) {
      SC_NCCL_CHECK(ncclSend(mem.ptr(call.buffer), call.buffer.bytes(), ncclUint8, 1, g.comms.at(mi), s));
    } else {
      SC_NCCL_CHECK(ncclRecv(mem.ptr(call.buffer), call.buffer.bytes(), ncclUint8, 0, g.comms.at(mi), s));
    }
    release_after(releases, call.stream);
    settle();
    return;
  }
  auto& counts = w_.channel_counts[key];
  const int64_t k = send ? counts.first++ : counts.second++;
  auto& transfers = w_.channels[key];
  if (static_cast<int64_t>(transfers.size()) <= k) transfers.resize(k + 1);
  Transfer& t = transfers[k];
  Arrival a{r_.rank, call.stream, {}, sync_event(), std::move(releases)};
  a.call.input = call.buffer;
  RankMemory mem(r_);
  const size_t bytes = static_cast<size_t>(call.buffer.bytes());
  if (send && !t.recv) {  // eager: stage the data in this stream's order and go on
    if (!r_.staging)
      r_.staging = std::make_unique<DeviceAllocator>(core::Allocator::caching, core::PoolReuse::best_fit,
                                                     w_.options.device_bytes_per_rank);
    t.staging = r_.staging->allocate(std::max<int64_t>(call.buffer.bytes(), 1), call.stream, s);
    SC_CUDA_CHECK(cudaMemcpyAsync(t.staging, mem.ptr(call.buffer), bytes, cudaMemcpyDeviceToDevice, s));
    SC_CUDA_CHECK(cudaEventRecord(a.ready, s));
    if (w_.holds) w_.holds->record(r_.rank, call.stream, a.ready, "");
    release_after(a.releases, call.stream);
    t.send = std::move(a);
    settle();
    return;
  }
  if (!send && t.send) {  // the send was staged: copy it out in this stream's order
    if (t.send->call.input.bytes() != call.buffer.bytes()) {
      throw ProgramFault("a p2p transfer's send and recv differ in size (run it on the simulator)");
    }
    RankState& from = *w_.ranks[t.send->rank];
    SC_CUDA_CHECK(cudaStreamWaitEvent(s, t.send->ready, 0));
    if (w_.holds)
      w_.holds->wait(r_.rank, call.stream, t.send->ready,
                     "'" + stream_name(call.stream) + "' receives '" + call.channel + "' from rank " +
                         std::to_string(t.send->rank));
    SC_CUDA_CHECK(cudaMemcpyAsync(mem.ptr(call.buffer), t.staging, bytes, cudaMemcpyDeviceToDevice, s));
    release_after(a.releases, call.stream);
    // Back to the sender's pool once this stream has copied it out.
    from.staging->release(t.staging, {s}, from.streams.at(t.send->stream).second);
    from.idle_sync_events.push_back(t.send->ready);
    r_.idle_sync_events.push_back(a.ready);
    t = Transfer{};
    t.launched = true;
    settle();
    return;
  }
  SC_CUDA_CHECK(cudaEventRecord(a.ready, s));
  if (w_.holds) w_.holds->record(r_.rank, call.stream, a.ready, "");
  (send ? t.send : t.recv) = std::move(a);
  if (send) {
    w_.launch_transfer(key, k);  // into the buffer of the recv, whose host waits for it
    settle();
  } else {
    r_.rendezvous_channel = key;  // a recv before its send: the host waits for the send
    r_.rendezvous_pair = k;
  }
}

std::unique_ptr<core::Runtime> make_runtime(GpuWorld::Impl& w, RankState& r) {
  return std::make_unique<GpuRuntime>(w, r);
}

}  // namespace shardcheck::gpu
