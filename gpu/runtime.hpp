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
//   GpuRunResult r = world.run([&](core::Runtime& rt) { return core::train_rank(rt, setup, &judge, &out[rt.rank()]); });
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/block_pool.hpp"
#include "core/runtime.hpp"
#include "gpu/device_allocator.hpp"

namespace shardcheck::gpu {

enum class CommMode : uint8_t { local, nccl };

struct GpuOptions {
  int ranks = 1;
  CommMode comm = CommMode::local;
  AllocMode alloc = AllocMode::caching;
  core::PoolReuse reuse = core::PoolReuse::best_fit;
  int64_t amplify_cycles = 0;  // spin this long on a communication stream before each collective
  int64_t device_bytes_per_rank = int64_t{32} << 30;
};

struct GpuRunResult {
  bool completed = false;
  std::string error;
  double seconds = 0;  // wall time of the run, device work included
};

class GpuWorld {
 public:
  explicit GpuWorld(GpuOptions options);
  ~GpuWorld();
  GpuWorld(const GpuWorld&) = delete;
  GpuWorld& operator=(const GpuWorld&) = delete;

  int ranks() const;
  const GpuOptions& options() const;
  GpuRunResult run(const std::function<core::Task<>(core::Runtime&)>& body);
  // A live buffer's bytes, copied to the host after the rank's device work.
  std::vector<std::byte> read(int rank, core::BufferId buffer);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Number of CUDA devices (0 without a driver or device).
int usable_devices();

}  // namespace shardcheck::gpu
