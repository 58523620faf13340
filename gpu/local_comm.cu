// Device-local collectives: one grid-stride kernel per collective; every element handled by
// one thread, which reads all inputs before writing any output, so in-place calls are safe.
#include "gpu/check.hpp"
#include "gpu/holds.hpp"
#include "gpu/local_comm.hpp"

namespace shardcheck::gpu {

namespace {

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// Round to nearest even, NaN kept quiet: the same bits as core::to_bf16.
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

template <class T, class Acc>
struct Elem;
template <>
struct Elem<float, float> {
  __device__ static float load(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
  __device__ static void store(void* p, int64_t i, float v) { static_cast<float*>(p)[i] = v; }
};
template <>
struct Elem<uint16_t, float> {
  __device__ static float load(const void* p, int64_t i) {
    return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
  __device__ static void store(void* p, int64_t i, float v) { static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); }
};
template <>
struct Elem<double, double> {
  __device__ static double load(const void* p, int64_t i) { return static_cast<const double*>(p)[i]; }
  __device__ static void store(void* p, int64_t i, double v) { static_cast<double*>(p)[i] = v; }
};

// Reduces element `index` over members in rank order (or descending, c.reverse).
template <class T, class Acc>
__device__ Acc reduce_at(const LocalCollective& c, int64_t index) {
  const int first = c.reverse ? c.members - 1 : 0, step = c.reverse ? -1 : 1;
  Acc acc = Elem<T, Acc>::load(c.in[first], index);
  for (int i = 1; i < c.members; ++i) acc = acc + Elem<T, Acc>::load(c.in[first + i * step], index);
  if (c.average) acc = acc / static_cast<Acc>(c.members);
  return acc;
}

template <class T, class Acc>
__global__ void reduce_kernel(const LocalCollective c) {
  const int64_t total = c.kind == LocalCollective::reduce_scatter ? c.out_numel * c.members : c.out_numel;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const Acc v = reduce_at<T, Acc>(c, idx);
    if (c.kind == LocalCollective::reduce_scatter) {
      Elem<T, Acc>::store(c.out[idx / c.out_numel], idx % c.out_numel, v);
    } else {
      for (int m = 0; m < c.members; ++m) Elem<T, Acc>::store(c.out[m], idx, v);
    }
  }
}

template <class W>
__global__ void copy_kernel(const LocalCollective c) {
  if (c.kind == LocalCollective::broadcast) {
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < c.out_numel;
         i += int64_t{gridDim.x} * blockDim.x) {
      const W v = static_cast<const W*>(c.in[c.root])[i];
      for (int m = 0; m < c.members; ++m) static_cast<W*>(c.out[m])[i] = v;
    }
    return;
  }
  // all_gather: output position idx comes from member idx / in_numel.
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < c.out_numel;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const W v = static_cast<const W*>(c.in[idx / c.in_numel])[idx % c.in_numel];
    for (int m = 0; m < c.members; ++m) static_cast<W*>(c.out[m])[idx] = v;
  }
}

__global__ void spin_kernel(int64_t cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks));
}

}  // namespace

void launch_local_collective(const LocalCollective& c, cudaStream_t stream) {
  const bool reduction = c.kind == LocalCollective::reduce_scatter || c.kind == LocalCollective::all_reduce;
  const int64_t n = c.kind == LocalCollective::reduce_scatter ? c.out_numel * c.members : c.out_numel;
  if (n == 0) return;
  const unsigned grid = grid_for(n);
  if (reduction) {
    switch (c.type) {
      case LocalCollective::f32:
        reduce_kernel<float, float><<<grid, 256, 0, stream>>>(c);
        break;
      case LocalCollective::bf16:
        reduce_kernel<uint16_t, float><<<grid, 256, 0, stream>>>(c);
        break;
      case LocalCollective::f64:
        reduce_kernel<double, double><<<grid, 256, 0, stream>>>(c);
        break;
      default:
        throw CudaError("device-local reductions take f32, bf16 or f64");
    }
  } else {
    switch (c.type) {
      case LocalCollective::bf16:
        copy_kernel<uint16_t><<<grid, 256, 0, stream>>>(c);
        break;
      case LocalCollective::bytes1:
        copy_kernel<uint8_t><<<grid, 256, 0, stream>>>(c);
        break;
      case LocalCollective::f32:
      case LocalCollective::bytes4:
        copy_kernel<uint32_t><<<grid, 256, 0, stream>>>(c);
        break;
      case LocalCollective::f64:
      case LocalCollective::bytes8:
        copy_kernel<uint64_t><<<grid, 256, 0, stream>>>(c);
        break;
      default:
        throw CudaError("unknown collective element type");
    }
  }
  SC_CUDA_CHECK_LAST();
}

void launch_spin(int64_t cycles, cudaStream_t stream) {
  if (cycles <= 0) return;
  spin_kernel<<<1, 1, 0, stream>>>(cycles);
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu

namespace shardcheck::gpu {

namespace {

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Forced race replay: waits, on one thread, until the host or another stream sets `flag`, or
// until the deadline; says which in `status`.
__global__ void hold_wait_kernel(volatile uint32_t* flag, volatile uint32_t* status, uint64_t deadline_ns) {
  const uint64_t start = global_ns();
  while (*flag == 0) {
    if (global_ns() - start > deadline_ns) {
      *status = 2;
      __threadfence_system();
      return;
    }
    __nanosleep(2000);
  }
  *status = 1;
  __threadfence_system();
}

__global__ void hold_release_kernel(volatile uint32_t* flag) {
  __threadfence_system();
  *flag = 1;
  __threadfence_system();
}

}  // namespace

void launch_hold_wait(uint32_t* flag, uint32_t* status, uint64_t deadline_ns, cudaStream_t stream) {
  hold_wait_kernel<<<1, 1, 0, stream>>>(flag, status, deadline_ns);
  SC_CUDA_CHECK_LAST();
}

void launch_hold_release(uint32_t* flag, cudaStream_t stream) {
  hold_release_kernel<<<1, 1, 0, stream>>>(flag);
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu
