// Internal state of the GPU backend (private to gpu/): ranks, their streams, events,
// buffers and host programs; process groups with their collective instances; p2p channels.
#pragma once

#include <nccl.h>

#include <condition_variable>
#include <coroutine>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "gpu/blas.hpp"
#include "gpu/kernels.hpp"
#include "gpu/runtime.hpp"

namespace shardcheck::gpu {

class GpuRuntime;

struct Buffer {
  void* ptr = nullptr;
  int64_t bytes = 0;
  int stream = 0;
  bool live = true;
  std::vector<int> recorded;  // record_stream
  std::string name;
};

struct RankState {
  int rank = 0;
  int device = 0;
  std::vector<std::pair<std::string, cudaStream_t>> streams;
  std::vector<cudaEvent_t> events;
  std::vector<std::string> event_names;
  std::vector<Buffer> buffers;
  std::unique_ptr<DeviceAllocator> allocator;
  std::unique_ptr<DeviceAllocator> staging;  // eager p2p sends: apart from the program's pool
  std::unique_ptr<Blas> blas;
  std::vector<int> groups;        // GroupId -> world group index
  cudaEvent_t scratch = nullptr;  // for wait_stream: a wait captures the record, so one suffices
  std::vector<cudaEvent_t> idle_sync_events, all_sync_events;
  std::deque<std::pair<cudaEvent_t, std::vector<std::byte>>> uploads;  // host data kept until copied
  // The host program.
  core::Task<> task;
  std::coroutine_handle<> parked;
  enum class Status : uint8_t { not_started, running, parked, done } status = Status::not_started;
  // The host resumes when all have completed; `true` marks events of our own pool.
  std::vector<std::pair<cudaEvent_t, bool>> waits;
  int rendezvous_group = -1;  // device-local: waiting for peers to issue a collective
  int64_t rendezvous_instance = -1;
  std::tuple<int, int, std::string> rendezvous_channel{-1, -1, ""};  // ... or a p2p partner
  int64_t rendezvous_pair = -1;
  std::unique_ptr<core::Runtime> runtime;
  struct KernelSample {
    cudaEvent_t start, stop;
    std::string name;
    double host_seconds = 0;
    std::optional<core::kernel::Gemm> gemm;
    core::DType a = core::DType::f32, b = core::DType::f32, c = core::DType::f32;
  };
  std::vector<KernelSample> kernel_samples;
  std::vector<CollectiveSample> collectives;
  int64_t delays = 0;  // --amplify spins launched
};

struct Arrival {
  int rank = 0;
  int stream = 0;
  core::CollectiveCall call;
  cudaEvent_t ready = nullptr;
  std::vector<int> releases;  // forced replay: holds this operation is the second access of
};

struct Instance {
  std::vector<std::optional<Arrival>> members;
  int arrived = 0;
  bool launched = false;
};

struct Group {
  std::string name;
  std::vector<int> members;
  std::vector<int64_t> issued;  // per member
  std::map<int64_t, Instance> instances;
  cudaEvent_t done = nullptr;  // the group's last collective; the next waits for it
  bool has_done = false;
  // NCCL mode: one communicator per member (each member's thread owns its own).
  std::vector<ncclComm_t> comms;
  std::optional<ncclUniqueId> id;
};

// Device-local p2p: the k-th send of a channel meets its k-th recv. Sends are eager, so no
// stream ever waits for work a host has not issued yet: a send whose recv is already issued
// copies straight into the recv's buffer (the receiving host waits for exactly that); one
// issued first copies into a staging block of the sender's pool, in the sender's stream order,
// and the host goes on; the recv later copies from it in the receiver's order. Values are
// those of the simulator's transfer; a send-send cycle completes here, as it would not under
// NCCL (the simulator reports it).
struct Transfer {
  std::optional<Arrival> send, recv;
  void* staging = nullptr;
  bool launched = false;  // the data is on its way to the recv's buffer
};

struct GpuWorld::Impl {
  GpuOptions options;
  int world_size = 0;
  // Every rank, or under an MPI launch (options.process_rank) only this process's one.
  std::vector<std::unique_ptr<RankState>> ranks;
  std::map<std::string, ncclUniqueId> received_ids;  // MPI: ids that came before their group was asked for
  std::deque<Group> groups;  // a deque: references stay valid while rank threads add groups
  std::map<std::tuple<int, int, std::string>, std::vector<Transfer>> channels;
  std::map<std::tuple<int, int, std::string>, std::pair<int64_t, int64_t>>
      channel_counts;                                           // sends, recvs issued
  std::map<std::tuple<int, int, std::string>, int> nccl_pairs;  // channel -> group index (NCCL mode)
  std::mutex mu;  // NCCL mode: group and communicator set-up across rank threads
  std::condition_variable cv;
  std::string error;
  std::unique_ptr<Holds> holds;  // forced replay (GpuOptions::holds); null without holds

  int group_index(int rank, std::string_view name, std::span<const int> members);
  RankState& rank_state(int rank) const;  // a rank of this process
  void launch_collective(Group& g, int64_t k);
  void launch_transfer(std::tuple<int, int, std::string> key, int64_t k);
  bool ready(RankState& r);
  std::string describe_waits() const;
};

std::unique_ptr<core::Runtime> make_runtime(GpuWorld::Impl& w, RankState& r);

}  // namespace shardcheck::gpu
