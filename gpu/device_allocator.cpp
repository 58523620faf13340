// Caching and stream-ordered device allocation.
#include "gpu/device_allocator.hpp"

#include <string>

#include "gpu/check.hpp"

namespace shardcheck::gpu {

DeviceAllocator::DeviceAllocator(core::Allocator mode, core::PoolReuse reuse, int64_t limit_bytes)
    : mode_(mode),
      pool_(/*merge*/ true, reuse,
            [this](uint64_t size) {
              if (reserved_ + static_cast<int64_t>(size) > limit_) {
                throw CudaError("device memory limit of " + std::to_string(limit_) + " bytes reached");
              }
              void* p = nullptr;
              SC_CUDA_CHECK(cudaMalloc(&p, size));
              reserved_ += static_cast<int64_t>(size);
              segments_.push_back(p);
              return reinterpret_cast<uint64_t>(p);
            }),
      limit_(limit_bytes) {}

DeviceAllocator::~DeviceAllocator() {
  for (void* p : segments_) cudaFree(p);
  for (cudaEvent_t e : all_events_) cudaEventDestroy(e);
}

cudaEvent_t DeviceAllocator::event() {
  if (!idle_events_.empty()) {
    cudaEvent_t e = idle_events_.back();
    idle_events_.pop_back();
    return e;
  }
  cudaEvent_t e;
  SC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  all_events_.push_back(e);
  return e;
}

void* DeviceAllocator::allocate(int64_t bytes, int stream_id, cudaStream_t stream, void* prefer) {
  if (mode_ == core::Allocator::stream_ordered) {
    void* p = nullptr;
    SC_CUDA_CHECK(cudaMallocAsync(&p, static_cast<size_t>(bytes > 0 ? bytes : 1), stream));
    return p;
  }
  // A block held back by record_stream is legal once every event recorded at its free has
  // completed: the allocator's event query, exactly as PyTorch's process_events does.
  auto legal = [&](const core::PoolBlock& b, int s) {
    if (b.stream != s) return false;
    for (uint64_t h : b.pending) {
      const cudaError_t st = cudaEventQuery(reinterpret_cast<cudaEvent_t>(h));
      if (st == cudaErrorNotReady) {
        cudaGetLastError();
        return false;
      }
      cuda_check(st, "cudaEventQuery", __FILE__, __LINE__);
    }
    return true;
  };
  // Events a reuse waited for are never recorded again (a split block's other half may still
  // list them); they are destroyed with the allocator.
  const auto n = static_cast<uint64_t>(bytes);
  if (prefer)
    return reinterpret_cast<void*>(
        pool_.allocate_at(n, stream_id, legal, reinterpret_cast<uint64_t>(prefer)).addr);
  return reinterpret_cast<void*>(pool_.allocate(n, stream_id, legal).addr);
}

void DeviceAllocator::release(void* p, const std::vector<cudaStream_t>& recorded, cudaStream_t alloc_stream) {
  if (mode_ == core::Allocator::stream_ordered) {
    for (cudaStream_t s : recorded) {
      cudaEvent_t e = event();
      SC_CUDA_CHECK(cudaEventRecord(e, s));
      SC_CUDA_CHECK(cudaStreamWaitEvent(alloc_stream, e, 0));
      idle_events_.push_back(e);  // the wait captured it; it may be recorded again
    }
    SC_CUDA_CHECK(cudaFreeAsync(p, alloc_stream));
    return;
  }
  std::vector<uint64_t> pending;
  for (cudaStream_t s : recorded) {
    cudaEvent_t e;
    SC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    all_events_.push_back(e);
    SC_CUDA_CHECK(cudaEventRecord(e, s));
    pending.push_back(reinterpret_cast<uint64_t>(e));
  }
  pool_.release(reinterpret_cast<uint64_t>(p), std::move(pending), 0);
}

}  // namespace shardcheck::gpu
