// GpuWorld: set-up, communicators, and the drivers that resume each rank's host program when
// what it waits for has happened (device-local: one thread for all ranks; NCCL: a thread per
// rank and GPU).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/base/status.hpp"
#include "gpu/check.hpp"
#include "gpu/local_comm.hpp"
#include "gpu/nccl_check.hpp"
#include "gpu/runtime_state.hpp"
#include "mpi/launch.hpp"

namespace shardcheck::gpu {

using core::InternalError;

namespace {

LocalCollective::Type local_type(core::DType t) {
  switch (t) {
    case core::DType::f32:
      return LocalCollective::f32;
    case core::DType::bf16:
      return LocalCollective::bf16;
    case core::DType::f64:
      return LocalCollective::f64;
    case core::DType::i32:
      return LocalCollective::bytes4;
    case core::DType::i64:
      return LocalCollective::bytes8;
    case core::DType::u8:
    case core::DType::i8:
    case core::DType::boolean:
      return LocalCollective::bytes1;
    case core::DType::f16:
    case core::DType::i16:
      throw InternalError("the GPU backend's local collectives have no 16-bit element type but bf16");
  }
  return LocalCollective::bytes1;
}

void* device_ptr(RankState& r, const core::TensorRef& t) {
  const Buffer& b = r.buffers.at(t.buffer);
  if (!b.live) throw InternalError("a collective on rank " + std::to_string(r.rank) + " uses a freed buffer");
  return static_cast<std::byte*>(b.ptr) + t.byte_offset();
}

}  // namespace

int usable_devices() { return device_count(); }

int GpuWorld::Impl::group_index(int rank, std::string_view name, std::span<const int> members) {
  std::unique_lock<std::mutex> lock(mu);
  std::vector<int> m(members.begin(), members.end());
  if (std::find(m.begin(), m.end(), rank) == m.end())
    throw InternalError("group '" + std::string(name) + "' does not contain rank " + std::to_string(rank));
  int gi = -1;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].name == name && groups[i].members == m) gi = static_cast<int>(i);
  }
  if (gi < 0) {
    Group g;
    g.name = std::string(name);
    g.members = m;
    g.issued.assign(m.size(), 0);
    g.comms.assign(m.size(), nullptr);
    groups.push_back(std::move(g));
    gi = static_cast<int>(groups.size() - 1);
  }
  if (options.comm != CommMode::nccl) return gi;
  // NCCL: the first member makes the unique id; every member then joins the communicator
  // (ncclCommInitRank returns once all members have called it).
  Group& g = groups[gi];
  const int mi = static_cast<int>(std::find(g.members.begin(), g.members.end(), rank) - g.members.begin());
  if (g.comms[mi]) return gi;
  if (options.process_rank >= 0 && !g.id) {
    // Members are other processes: the first sends the id to each; a receiver keeps ids of
    // groups it has not reached yet (members create groups in their own program order).
    std::string key = g.name + "|";
    for (int m : g.members) key += std::to_string(m) + ",";
    if (mi == 0) {
      ncclUniqueId id;
      SC_NCCL_CHECK(ncclGetUniqueId(&id));
      std::vector<std::byte> msg(sizeof id + key.size());
      std::memcpy(msg.data(), &id, sizeof id);
      std::memcpy(msg.data() + sizeof id, key.data(), key.size());
      for (size_t m = 1; m < g.members.size(); ++m) mpi::send(g.members[m], mpi::kTagGroupId, msg);
      g.id = id;
    } else {
      while (!received_ids.count(key)) {
        const std::vector<std::byte> msg = mpi::recv(g.members[0], mpi::kTagGroupId);
        if (msg.size() < sizeof(ncclUniqueId)) throw InternalError("a malformed NCCL id message");
        ncclUniqueId id;
        std::memcpy(&id, msg.data(), sizeof id);
        received_ids[std::string(reinterpret_cast<const char*>(msg.data()) + sizeof id,
                                 msg.size() - sizeof id)] = id;
      }
      g.id = received_ids[key];
      received_ids.erase(key);
    }
  }
  if (mi == 0 && !g.id) {
    ncclUniqueId id;
    SC_NCCL_CHECK(ncclGetUniqueId(&id));
    g.id = id;
    cv.notify_all();
  }
  cv.wait(lock, [&] { return groups[gi].id.has_value(); });
  const ncclUniqueId id = *groups[gi].id;
  const int n = static_cast<int>(groups[gi].members.size());
  lock.unlock();
  ncclComm_t comm;
  SC_NCCL_CHECK(ncclCommInitRank(&comm, n, id, mi));
  lock.lock();
  groups[gi].comms[mi] = comm;
  return gi;
}

void GpuWorld::Impl::launch_collective(Group& g, int64_t k) {
  Instance& inst = g.instances.at(k);
  RankState& first = *ranks[inst.members[0]->rank];
  const cudaStream_t s0 = first.streams.at(inst.members[0]->stream).second;
  const core::CollectiveCall& c0 = inst.members[0]->call;
  LocalCollective lc;
  lc.kind = static_cast<int>(c0.kind);
  lc.type = local_type(c0.input.dtype);
  lc.average = c0.reduce == core::ReduceOp::avg;
  lc.reverse = options.reverse_reduction;
  lc.members = static_cast<int>(g.members.size());
  lc.root = c0.root;
  lc.in_numel = c0.input.numel;
  lc.out_numel = c0.output.numel;
  if (lc.members > kMaxLocalMembers) throw InternalError("device-local collectives take at most 64 members");
  for (int m = 0; m < lc.members; ++m) {
    const Arrival& a = *inst.members[m];
    if (a.call.input.numel != c0.input.numel || a.call.output.numel != c0.output.numel ||
        a.call.kind != c0.kind || a.call.input.dtype != c0.input.dtype || a.call.reduce != c0.reduce ||
        a.call.root != c0.root || a.call.tag != c0.tag) {
      throw ProgramFault("collective #" + std::to_string(k) + " of group '" + g.name +
                         "' differs across ranks (run it on the simulator to see how)");
    }
    RankState& r = *ranks[a.rank];
    lc.in[m] = device_ptr(r, a.call.input);
    lc.out[m] = device_ptr(r, a.call.output);
    SC_CUDA_CHECK(cudaStreamWaitEvent(s0, a.ready, 0));
  }
  // One communicator runs its collectives in issue order.
  if (!g.done) SC_CUDA_CHECK(cudaEventCreateWithFlags(&g.done, cudaEventDisableTiming));
  if (g.has_done) SC_CUDA_CHECK(cudaStreamWaitEvent(s0, g.done, 0));
  launch_local_collective(lc, s0);
  SC_CUDA_CHECK(cudaEventRecord(g.done, s0));
  g.has_done = true;
  if (holds) {  // forced replay: every member's stream is behind any member's arrival
    std::vector<cudaEvent_t> from;
    std::vector<std::pair<int, int>> streams;
    for (int m = 0; m < lc.members; ++m) {
      from.push_back(inst.members[m]->ready);
      streams.emplace_back(inst.members[m]->rank, inst.members[m]->stream);
    }
    holds->join(from, streams, "collective '" + c0.tag + "' of group '" + g.name + "'");
  }
  for (int m = 0; m < lc.members; ++m) {
    const Arrival& a = *inst.members[m];
    const cudaStream_t sm = ranks[a.rank]->streams.at(a.stream).second;
    if (m > 0) SC_CUDA_CHECK(cudaStreamWaitEvent(sm, g.done, 0));
    for (int h : a.releases) holds->release_after(h, sm);
  }
  for (int m = 0; m < lc.members; ++m)
    ranks[inst.members[m]->rank]->idle_sync_events.push_back(inst.members[m]->ready);
  g.instances.erase(k);
}

void GpuWorld::Impl::launch_transfer(std::tuple<int, int, std::string> key, int64_t k) {
  Transfer& t = channels.at(key)[k];
  RankState& from = *ranks[t.send->rank];
  RankState& to = *ranks[t.recv->rank];
  const core::TensorRef src = t.send->call.input, dst = t.recv->call.input;
  if (src.bytes() != dst.bytes())
    throw ProgramFault("a p2p transfer's send and recv differ in size (run it on the simulator)");
  const cudaStream_t rs = to.streams.at(t.recv->stream).second, ss = from.streams.at(t.send->stream).second;
  SC_CUDA_CHECK(cudaStreamWaitEvent(rs, t.send->ready, 0));
  SC_CUDA_CHECK(cudaMemcpyAsync(device_ptr(to, dst), device_ptr(from, src), static_cast<size_t>(src.bytes()),
                                cudaMemcpyDeviceToDevice, rs));
  SC_CUDA_CHECK(cudaEventRecord(t.recv->ready, rs));
  SC_CUDA_CHECK(cudaStreamWaitEvent(ss, t.recv->ready, 0));  // rendezvous: the sender waits too
  if (holds) {  // forced replay: each side is behind what the other was behind
    const std::string what = "transfer '" + std::get<2>(key) + "' from rank " + std::to_string(from.rank) +
                             " to rank " + std::to_string(to.rank);
    holds->join({t.send->ready, t.recv->ready}, {{from.rank, t.send->stream}, {to.rank, t.recv->stream}},
                what);
    for (int h : t.recv->releases) holds->release_after(h, rs);
    for (int h : t.send->releases) holds->release_after(h, ss);
  }
  from.idle_sync_events.push_back(t.send->ready);
  to.idle_sync_events.push_back(t.recv->ready);
  t.launched = true;
}

bool GpuWorld::Impl::ready(RankState& r) {
  if (r.rendezvous_group >= 0) {
    if (groups[r.rendezvous_group].instances.count(r.rendezvous_instance)) return false;
    r.rendezvous_group = -1;
  }
  if (r.rendezvous_pair >= 0) {
    if (!channels.at(r.rendezvous_channel)[r.rendezvous_pair].launched) return false;
    r.rendezvous_pair = -1;
  }
  while (!r.waits.empty()) {
    const auto [event, owned] = r.waits.back();
    const cudaError_t st = cudaEventQuery(event);
    if (st == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    cuda_check(st, "cudaEventQuery", __FILE__, __LINE__);
    if (owned) r.idle_sync_events.push_back(event);
    r.waits.pop_back();
  }
  return true;
}

std::string GpuWorld::Impl::describe_waits() const {
  std::string s;
  for (const auto& r : ranks) {
    if (r->status == RankState::Status::done) continue;
    s += "\n  rank " + std::to_string(r->rank) + ": ";
    if (r->rendezvous_group >= 0) {
      s += "collective #" + std::to_string(r->rendezvous_instance) + " of group '" +
           groups[r->rendezvous_group].name + "'";
    } else if (r->rendezvous_pair >= 0) {
      s += "a p2p transfer on channel '" + std::get<2>(r->rendezvous_channel) + "'";
    } else {
      s += "device work";
    }
  }
  return s;
}

GpuWorld::GpuWorld(GpuOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->world_size = options.ranks;
  const int devices = device_count();
  if (devices == 0) throw CudaError("no CUDA device: the gpu backend needs one (the simulator needs none)");
  const bool process = options.process_rank >= 0;
  if (process && (options.comm != CommMode::nccl || options.process_rank >= options.ranks ||
                  options.process_device >= devices)) {
    throw InternalError("an MPI launch runs NCCL, one rank per process and GPU");
  }
  if (!process && options.comm == CommMode::nccl && options.ranks > devices) {
    throw CudaError("NCCL mode runs one rank per GPU: " + std::to_string(options.ranks) + " ranks but " +
                    std::to_string(devices) +
                    " GPUs (use the device-local communicator for several ranks on one GPU, or an MPI launch "
                    "over several hosts)");
  }
  for (int r = 0; r < options.ranks; ++r) {
    if (process && r != options.process_rank) continue;
    auto st = std::make_unique<RankState>();
    st->rank = r;
    st->device = process ? options.process_device : options.comm == CommMode::nccl ? r : 0;
    SC_CUDA_CHECK(cudaSetDevice(st->device));
    st->allocator =
        std::make_unique<DeviceAllocator>(options.alloc, options.reuse, options.device_bytes_per_rank);
    st->blas = std::make_unique<Blas>();
    SC_CUDA_CHECK(cudaEventCreateWithFlags(&st->scratch, cudaEventDisableTiming));
    impl_->ranks.push_back(std::move(st));
  }
  for (auto& st : impl_->ranks) st->runtime = make_runtime(*impl_, *st);
  if (!options.holds.empty()) {
    if (options.comm != CommMode::local)
      throw InternalError("forced race replay runs on the device-local communicator (--comm local)");
    SC_CUDA_CHECK(cudaSetDevice(0));
    impl_->holds = std::make_unique<Holds>(options.holds, options.hold_deadline_seconds);
  }
}

GpuWorld::~GpuWorld() {
  for (auto& st : impl_->ranks) {
    cudaSetDevice(st->device);
    cudaDeviceSynchronize();
  }
  for (auto& g : impl_->groups) {
    for (ncclComm_t c : g.comms) {
      if (c) ncclCommDestroy(c);
    }
    if (g.done) cudaEventDestroy(g.done);
  }
  for (auto& st : impl_->ranks) {
    cudaSetDevice(st->device);
    st->task = {};
    st->blas.reset();
    st->allocator.reset();
    st->staging.reset();
    for (auto& [name, s] : st->streams) cudaStreamDestroy(s);
    for (cudaEvent_t e : st->events) cudaEventDestroy(e);
    for (cudaEvent_t e : st->all_sync_events) cudaEventDestroy(e);
    if (st->scratch) cudaEventDestroy(st->scratch);
  }
}

int GpuWorld::ranks() const { return impl_->world_size; }

bool GpuWorld::runs_rank(int rank) const {
  for (const auto& r : impl_->ranks) {
    if (r->rank == rank) return true;
  }
  return false;
}

RankState& GpuWorld::Impl::rank_state(int rank) const {
  for (auto& r : ranks) {
    if (r->rank == rank) return *r;
  }
  throw InternalError("rank " + std::to_string(rank) + " runs in another process");
}
const GpuOptions& GpuWorld::options() const { return impl_->options; }

std::vector<std::byte> GpuWorld::read(int rank, core::BufferId buffer) {
  RankState& r = impl_->rank_state(rank);
  SC_CUDA_CHECK(cudaSetDevice(r.device));
  SC_CUDA_CHECK(cudaDeviceSynchronize());
  const Buffer& b = r.buffers.at(buffer);
  std::vector<std::byte> out(static_cast<size_t>(b.bytes));
  SC_CUDA_CHECK(cudaMemcpy(out.data(), b.ptr, out.size(), cudaMemcpyDeviceToHost));
  return out;
}

KernelProfile GpuWorld::kernel_profile() {
  KernelProfile p;
  for (auto& r : impl_->ranks) {
    SC_CUDA_CHECK(cudaSetDevice(r->device));
    SC_CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto& s : r->kernel_samples) {
      float ms = 0;
      SC_CUDA_CHECK(cudaEventElapsedTime(&ms, s.start, s.stop));
      auto k = std::find_if(p.kernels.begin(), p.kernels.end(),
                            [&](const KernelProfile::Kernel& x) { return x.name == s.name; });
      if (k == p.kernels.end()) k = p.kernels.insert(p.kernels.end(), KernelProfile::Kernel{s.name, 0, 0, 0});
      k->launches++;
      k->milliseconds += ms;
      k->host_milliseconds += 1e3 * s.host_seconds;
      if (s.gemm) {
        const core::kernel::Gemm& g = *s.gemm;
        p.gemm_milliseconds += ms;
        p.gemm_flops += 2.0 * static_cast<double>(g.m) * g.n * g.k;
        ++p.gemm_launches;
        auto same = [&](const KernelProfile::Shape& x) {
          return x.gemm.m == g.m && x.gemm.n == g.n && x.gemm.k == g.k && x.gemm.trans_a == g.trans_a &&
                 x.gemm.trans_b == g.trans_b && x.gemm.beta == g.beta && x.a == s.a && x.b == s.b &&
                 x.c == s.c;
        };
        auto it = std::find_if(p.shapes.begin(), p.shapes.end(), same);
        if (it == p.shapes.end())
          it = p.shapes.insert(p.shapes.end(), KernelProfile::Shape{g, s.a, s.b, s.c, 0, 0});
        it->launches++;
        it->milliseconds += ms;
      }
      cudaEventDestroy(s.start);
      cudaEventDestroy(s.stop);
    }
    r->kernel_samples.clear();
  }
  std::sort(p.kernels.begin(), p.kernels.end(),
            [](const auto& a, const auto& b) { return a.milliseconds > b.milliseconds; });
  return p;
}

const std::vector<CollectiveSample>& GpuWorld::collectives(int rank) const {
  return impl_->rank_state(rank).collectives;
}

namespace {

// Resumes a parked or new host program; rethrows what it threw.
void step(RankState& r) {
  const bool first = r.status == RankState::Status::not_started;
  r.status = RankState::Status::running;
  if (first) {
    r.task.start();
  } else {
    std::exchange(r.parked, {}).resume();
  }
  if (r.task.done()) {
    r.status = RankState::Status::done;
    r.task.take();
  }
}

void drop_finished_uploads(RankState& r) {
  while (!r.uploads.empty() && cudaEventQuery(r.uploads.front().first) == cudaSuccess) {
    r.idle_sync_events.push_back(r.uploads.front().first);
    r.uploads.pop_front();
  }
  cudaGetLastError();
}

// Device-local: one thread, every rank. A rank runs when what it waits for has happened;
// when none can, the driver blocks on a pending event, or reports a deadlock.
void drive_local(GpuWorld::Impl& w) {
  SC_CUDA_CHECK(cudaSetDevice(0));
  while (true) {
    bool progressed = false, all_done = true;
    for (auto& r : w.ranks) {
      if (r->status == RankState::Status::done) continue;
      all_done = false;
      if (r->status == RankState::Status::not_started ||
          (r->status == RankState::Status::parked && w.ready(*r))) {
        step(*r);
        progressed = true;
      }
      drop_finished_uploads(*r);
    }
    if (all_done) return;
    if (progressed) continue;
    cudaEvent_t pending = nullptr;
    std::vector<std::pair<int, cudaEvent_t>> behind;  // forced replay: host waits behind a hold
    for (auto& r : w.ranks) {
      if (r->status == RankState::Status::parked && r->rendezvous_group < 0 && r->rendezvous_pair < 0 &&
          !r->waits.empty()) {
        for (const auto& [e, owned] : r->waits) {
          if (w.holds && w.holds->behind_hold(e)) {
            behind.emplace_back(r->rank, e);
          } else {
            pending = e;
          }
        }
      }
    }
    // Every host waits for work behind a hold: the program orders the held access first.
    if (!pending && !behind.empty()) {
      for (const auto& [rank, e] : behind) w.holds->release_for_host_wait(rank, e);
      continue;
    }
    if (!pending)
      throw ProgramFault("deadlock on the GPU: every rank waits for a peer that will not come:" +
                         w.describe_waits());
    SC_CUDA_CHECK(cudaEventSynchronize(pending));
  }
}

// NCCL: one thread per rank on its own GPU; a host wait blocks only that thread.
void drive_rank(GpuWorld::Impl& w, RankState& r) {
  SC_CUDA_CHECK(cudaSetDevice(r.device));
  step(r);
  while (r.status != RankState::Status::done) {
    for (const auto& [e, owned] : r.waits) {
      SC_CUDA_CHECK(cudaEventSynchronize(e));
      if (owned) r.idle_sync_events.push_back(e);
    }
    r.waits.clear();
    drop_finished_uploads(r);
    step(r);
  }
  (void)w;
}

}  // namespace

GpuRunResult GpuWorld::run(const std::function<core::Task<>(core::Runtime&)>& body) {
  GpuRunResult result;
  for (auto& r : impl_->ranks) r->task = body(*r->runtime);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (impl_->options.comm == CommMode::local) {
      try {
        drive_local(*impl_);
      } catch (...) {
        if (impl_->holds) impl_->holds->release_rest();
        throw;
      }
      if (impl_->holds) impl_->holds->release_rest();
    } else {
      std::vector<std::thread> threads;
      std::vector<std::string> errors(impl_->ranks.size());
      for (size_t i = 0; i < impl_->ranks.size(); ++i) {
        threads.emplace_back([&, i] {
          try {
            drive_rank(*impl_, *impl_->ranks[i]);
          } catch (const std::exception& e) {
            errors[i] = "rank " + std::to_string(i) + ": " + e.what();
            std::lock_guard<std::mutex> lock(impl_->mu);
            for (auto& g : impl_->groups) {
              for (ncclComm_t& c : g.comms) {
                if (c) ncclCommAbort(c);  // unblock the others' collectives
                c = nullptr;
              }
            }
          }
        });
      }
      for (auto& t : threads) t.join();
      for (const auto& e : errors) {
        if (!e.empty() && result.error.empty()) result.error = e;
      }
    }
    for (auto& r : impl_->ranks) {
      SC_CUDA_CHECK(cudaSetDevice(r->device));
      SC_CUDA_CHECK(cudaDeviceSynchronize());
    }
  } catch (const ProgramFault& e) {
    result.error = e.what();
    result.program_fault = true;
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (impl_->holds) {
    for (auto& r : impl_->ranks) {
      cudaSetDevice(r->device);
      cudaDeviceSynchronize();
    }
    std::string missed;
    result.holds = impl_->holds->outcomes(missed);
    if (result.error.empty()) result.error = missed;
  }
  result.completed = result.error.empty();
  for (const auto& r : impl_->ranks) result.delays += r->delays;
  return result;
}

}  // namespace shardcheck::gpu
