// Device memory for one rank on a real GPU, with the semantics the simulator models, so the
// upstream races reproduce on hardware. `caching`: PyTorch's CUDACachingAllocator — blocks
// of cudaMalloc'd segments belong to the stream current at allocation, a free returns the
// block to that stream's pool at once (host time), and record_stream holds it back until an
// event recorded on each recorded stream at the free has completed (core::BlockPool does
// the bookkeeping). `async`: cudaMallocAsync/cudaFreeAsync on the allocating stream, with
// record_stream turned into event waits before the free, as PyTorch's async backend does.
//   DeviceAllocator a(core::Allocator::caching, core::PoolReuse::best_fit, limit);
//   void* p = a.allocate(4096, stream_id, stream);
//   a.release(p, {other_stream}, stream);
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <vector>

#include "core/runtime/block_pool.hpp"

namespace shardcheck::gpu {

class DeviceAllocator {
 public:
  DeviceAllocator(core::Allocator mode, core::PoolReuse reuse, int64_t limit_bytes);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // `stream_id` names the stream in this rank's pools; `stream` is its CUDA stream.
  // `prefer` (caching mode): take the free block at that address when it is legal and large
  // enough (core::BlockPool::allocate_at).
  void* allocate(int64_t bytes, int stream_id, cudaStream_t stream, void* prefer = nullptr);
  // Frees at host time. `recorded` are the other streams the buffer was used on
  // (record_stream); `alloc_stream` is where it was allocated.
  void release(void* p, const std::vector<cudaStream_t>& recorded, cudaStream_t alloc_stream);
  int64_t reserved_bytes() const { return reserved_; }

 private:
  cudaEvent_t event();  // a reusable event from the pool

  core::Allocator mode_;
  core::BlockPool pool_;
  int64_t limit_;
  int64_t reserved_ = 0;
  std::vector<void*> segments_;
  std::vector<cudaEvent_t> idle_events_;
  std::vector<cudaEvent_t> all_events_;
};

}  // namespace shardcheck::gpu
