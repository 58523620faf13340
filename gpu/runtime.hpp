// The CUDA backend: core::Runtime on real GPUs, so the strategy code the simulator checks
// runs unchanged on hardware. Each rank has its own CUDA streams and events, a device
// allocator with PyTorch's caching semantics (or cudaMallocAsync), and a communicator:
//  - device-local: N ranks on one GPU in one process, one thread driving every rank's
//    coroutine; a collective is one kernel that adds members in rank order (bitwise
//    reproducible, and equal to the simulator's results);
//  - NCCL: one rank per GPU, one process with a thread per GPU.
// A host program suspends only where it must wait (host syncs, downloads, and in
// device-local mode until every member has issued a collective); the driver resumes it when
// the CUDA events it waits on complete.
//   GpuWorld world({.ranks = 4});
//   GpuRunResult r = world.run([&](core::Runtime& rt) { return core::train_rank(rt, setup, &judge,
//   &out[rt.rank()]); });
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/block_pool.hpp"
#include "core/runtime/runtime.hpp"
#include "gpu/device_allocator.hpp"
#include "gpu/holds.hpp"

namespace shardcheck::gpu {

enum class CommMode : uint8_t { local, nccl };

// Where --amplify puts its spins. `collectives`: on a collective's stream before every
// collective. `sites`: only before the operations listed in delay_sites; `shardcheck run
// --amplify-at race` lists there the first access of each race the simulator found, so that
// access runs late on the hardware and the unordered second access gets in before it.
enum class AmplifyAt : uint8_t { collectives, sites };

// Every operation of `rank` on the stream named `stream` that the simulator would name `op`
// (core::op_name: "kernel 'block.2.accumulate'", "reduce_scatter 'grad'", ...).
struct DelaySite {
  int rank = 0;
  std::string stream;
  std::string op;
};

struct GpuOptions {
  int ranks = 1;
  CommMode comm = CommMode::local;
  core::Allocator alloc = core::Allocator::caching;
  core::PoolReuse reuse = core::PoolReuse::best_fit;
  int64_t amplify_cycles = 0;  // spin this long before each delayed operation (see amplify_at)
  AmplifyAt amplify_at = AmplifyAt::collectives;
  std::vector<DelaySite> delay_sites;
  // Forced race replay (gpu/holds.hpp): each held access waits on the device until its second
  // access has run, the program orders them, or hold_deadline_seconds pass. Device-local only.
  std::vector<HoldSite> holds;
  double hold_deadline_seconds = 10;
  int64_t device_bytes_per_rank = int64_t{32} << 30;
  bool profile_kernels = false;  // time every launch with CUDA events, and its host cost (for measurements)
  // Measurement switches (not for checking): the device-local communicator adds members in
  // descending rank order (another valid reduction order, to size order-only differences);
  // collectives and transfers are not run at all (compute-only timing); every collective a
  // rank issues is recorded (the sizes a strategy communicates).
  bool reverse_reduction = false;
  // Every operation finishes before its host issues the next (program order): the correctly
  // ordered execution a trace program's racing runs are held to.
  bool serial = false;
  bool skip_communication = false;
  bool record_collectives = false;
  // An MPI launch (mpi/launch.hpp; NCCL only): this process runs global rank process_rank of
  // `ranks`, on GPU process_device; every other rank is another process.
  int process_rank = -1;
  int process_device = 0;
};

// A collective as a rank issued it (GpuOptions::record_collectives).
struct CollectiveSample {
  core::CollectiveKind kind = core::CollectiveKind::all_reduce;
  core::DType dtype = core::DType::f32;
  core::ReduceOp reduce = core::ReduceOp::sum;
  int64_t in_numel = 0, out_numel = 0;
  int members = 0;
  std::string group;
};

// Launches timed with events (GpuOptions::profile_kernels): per kernel name, the device time
// on its stream and the host time spent issuing it; and the Gemm launches in all and per
// distinct shape (so each shape can be timed again on its own).
struct KernelProfile {
  struct Kernel {
    std::string name;
    int64_t launches = 0;
    double milliseconds = 0;       // device time, summed over launches
    double host_milliseconds = 0;  // host time inside the launch call (checks, cuBLASLt set-up, enqueue)
  };
  struct Shape {
    core::kernel::Gemm gemm;
    core::DType a = core::DType::f32, b = core::DType::f32, c = core::DType::f32;
    int64_t launches = 0;
    double milliseconds = 0;
  };
  std::vector<Kernel> kernels;  // most device time first
  int64_t gemm_launches = 0;
  double gemm_milliseconds = 0;  // summed over launches (concurrent launches overlap in wall time)
  double gemm_flops = 0;         // 2 m n k per launch
  std::vector<Shape> shapes;
};

struct GpuRunResult {
  bool completed = false;
  std::string error;
  bool program_fault = false;      // the error is the program's (see ProgramFault), not the backend's
  double seconds = 0;              // wall time of the run, device work included
  int64_t delays = 0;              // spins --amplify launched, over all ranks
  std::vector<HoldOutcome> holds;  // per GpuOptions::holds, how each ended
};

class GpuWorld {
 public:
  explicit GpuWorld(GpuOptions options);
  ~GpuWorld();
  GpuWorld(const GpuWorld&) = delete;
  GpuWorld& operator=(const GpuWorld&) = delete;

  int ranks() const;
  bool runs_rank(int rank) const;  // false for the other processes' ranks of an MPI launch
  const GpuOptions& options() const;
  GpuRunResult run(const std::function<core::Task<>(core::Runtime&)>& body);
  // A live buffer's bytes, copied to the host after the rank's device work.
  std::vector<std::byte> read(int rank, core::BufferId buffer);
  // The launches of every rank so far (needs options.profile_kernels); synchronizes.
  KernelProfile kernel_profile();
  // The collectives `rank` issued, in issue order (GpuOptions::record_collectives).
  const std::vector<CollectiveSample>& collectives(int rank) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Number of CUDA devices (0 without a driver or device).
int usable_devices();

}  // namespace shardcheck::gpu
