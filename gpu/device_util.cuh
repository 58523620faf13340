// Device-side helpers shared by the .cu files (CUDA-only: never include this from a .cpp):
// dtype loads and stores that widen and round exactly like core/kernels/cpu/operands.hpp's load/store,
// core::to_bf16's round-to-nearest-even, and launch geometry.
// Arithmetic note: the library is compiled with -fmad=false (see CMakeLists.txt), so `a * b
// + c` is two rounded operations, as in the CPU reference. Kernels that must match the CPU
// bit for bit still spell sqrt and division as __fsqrt_rn / __fdiv_rn, which stay IEEE even
// under fast-math flags.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/check.hpp"
#include "gpu/operand.hpp"

namespace shardcheck::gpu::dev {

constexpr int kBlock = 256;
constexpr int64_t kMaxGrid = 4096;

// Blocks for a grid-stride loop over n items: enough to cover n, at most kMaxGrid (the loop
// strides over the rest), at least 1. It depends on n alone, never on the device.
inline int grid_for(int64_t n, int block = kBlock) {
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxGrid ? kMaxGrid : blocks));
}

__device__ __forceinline__ int64_t thread_index() { return blockIdx.x * int64_t{blockDim.x} + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return int64_t{gridDim.x} * blockDim.x; }

// core::to_bf16, bit for bit: round to nearest even; a NaN stays NaN with the quiet bit set.
// (__float2bfloat16_rn would do for numbers, but NaN payloads must match the CPU too.)
__device__ __forceinline__ uint16_t to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
__device__ __forceinline__ float from_bf16(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ float round_bf16(float f) { return from_bf16(to_bf16(f)); }

// std::numeric_limits<float>::quiet_NaN(), which the CPU writes for corrupted ids.
__device__ __forceinline__ float quiet_nan() { return __uint_as_float(0x7fc00000u); }

// Serial sums in the CPU's order are latency-bound: a thread that loads one element and adds
// it before loading the next waits a memory round trip per element. kSerialBatch elements are
// loaded into registers first and then added in order: the same additions, the same bits, one
// round trip per batch.
constexpr int kSerialBatch = 16;

// Element i of a buffer of dtype t, converted to C (float or double) as core's load<C> does.
template <class C>
__device__ __forceinline__ C load(const void* base, core::DType t, int64_t i) {
  switch (t) {
    case core::DType::f32:
      return static_cast<C>(static_cast<const float*>(base)[i]);
    case core::DType::bf16:
      return static_cast<C>(from_bf16(static_cast<const uint16_t*>(base)[i]));
    case core::DType::f64:
      return static_cast<C>(static_cast<const double*>(base)[i]);
    case core::DType::i32:
      return static_cast<C>(static_cast<const int32_t*>(base)[i]);
    case core::DType::i64:
      return static_cast<C>(static_cast<const int64_t*>(base)[i]);
    case core::DType::u8:
    case core::DType::boolean:
      return static_cast<C>(static_cast<const uint8_t*>(base)[i]);
    case core::DType::i8:
      return static_cast<C>(static_cast<const int8_t*>(base)[i]);
    case core::DType::i16:
    case core::DType::f16:  // as core's load: f16 values are not modelled
      return static_cast<C>(static_cast<const int16_t*>(base)[i]);
  }
  return C{};
}

// Stores v into element i, rounded to dtype t once, as core's store<C> does (bf16 through
// float, like core::to_bf16(static_cast<float>(v))).
template <class C>
__device__ __forceinline__ void store(void* base, core::DType t, int64_t i, C v) {
  switch (t) {
    case core::DType::f32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case core::DType::bf16:
      static_cast<uint16_t*>(base)[i] = to_bf16(static_cast<float>(v));
      return;
    case core::DType::f64:
      static_cast<double*>(base)[i] = static_cast<double>(v);
      return;
    case core::DType::i32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      return;
    case core::DType::i64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      return;
    case core::DType::u8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      return;
    case core::DType::boolean:
    case core::DType::i8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(static_cast<int64_t>(v));
      return;
    case core::DType::i16:
    case core::DType::f16:
      static_cast<int16_t*>(base)[i] = static_cast<int16_t>(v);
      return;
  }
}

// The fp32 kernels' operands (f32 or bf16), widened exactly / rounded once.
__device__ __forceinline__ float loadf(const Operand& o, int64_t i) { return load<float>(o.ptr, o.dtype, i); }
__device__ __forceinline__ void storef(const Operand& o, int64_t i, float v) {
  store<float>(o.ptr, o.dtype, i, v);
}

// out[i] = op(a[i], b[i]) for every i < out.numel, computed in C. An operand with a null ptr
// is absent and reads as C{} (Fill has no input, Copy one). Reading element i before writing
// it in the same thread makes in-place calls (out == a) safe.
template <class C, class Op>
__global__ void map_kernel(Operand a, Operand b, Operand out, Op op) {
  for (int64_t i = thread_index(); i < out.numel; i += grid_stride()) {
    const C x = a.ptr ? load<C>(a.ptr, a.dtype, i) : C{};
    const C y = b.ptr ? load<C>(b.ptr, b.dtype, i) : C{};
    store<C>(out.ptr, out.dtype, i, op(x, y));
  }
}

template <class C, class Op>
void launch_map(Operand a, Operand b, Operand out, Op op, cudaStream_t stream) {
  if (out.numel == 0) return;
  map_kernel<C><<<grid_for(out.numel), kBlock, 0, stream>>>(a, b, out, op);
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu::dev
