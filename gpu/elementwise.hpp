// Elementwise kernels (Fill, Copy, Add, Scale, Divide, RoundBf16, RoundToGrid), BiasAdd, and
// the Opaque kernels' byte pattern. Each matches its CPU twin in core/kernels/cpu/elementwise.cpp
// bit for bit; tests/gpu/kernels_test.cpp checks that.
//   gpu::launch_scale(in, out, 0.5, stream);   // out[i] = in[i] * 0.5
// Fill/Copy/Add/Scale/Divide take operands of any dtype and compute in float, or in double
// when any operand is f64 (as core::execute_cpu does); the others take f32 or bf16.
// Launches are asynchronous; errors in the launch itself throw CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/operand.hpp"

namespace shardcheck::gpu {

// out[i] = value (cast to the compute type, then rounded to out's dtype).
void launch_fill(Operand out, double value, cudaStream_t stream);
// out[i] = in[i], converted (bf16 rounds to nearest even).
void launch_copy(Operand in, Operand out, cudaStream_t stream);
// out[i] = a[i] + b[i]
void launch_add(Operand a, Operand b, Operand out, cudaStream_t stream);
// out[i] = in[i] * factor (factor cast to the compute type once)
void launch_scale(Operand in, Operand out, double factor, cudaStream_t stream);
// out[i] = in[i] / divisor, an IEEE division
void launch_divide(Operand in, Operand out, double divisor, cudaStream_t stream);
// out[i] = round_bf16(in[i]), kept in out's dtype
void launch_round_bf16(Operand in, Operand out, cudaStream_t stream);
// out[i] = (float)(q * rint(clamp((double)in[i] / q, -limit, limit))), in double
void launch_round_to_grid(Operand in, Operand out, double q, double limit, cudaStream_t stream);
// y[r][c] = x[r][c] + bias[c] for a rows x cols row-major x; y may be x.
void launch_bias_add(Operand x, Operand bias, Operand y, int64_t rows, int64_t cols, cudaStream_t stream);
// What the CPU's Opaque kernel writes over [ptr, ptr + bytes): byte i is byte (i % 4),
// little-endian, of the word 0x3f800000 | ((h + (i / 4) * 0x9e3779b9) & 0x7fffff), with h the
// low 32 bits of core::fnv1a(kernel name).
void launch_opaque_pattern(void* ptr, int64_t bytes, uint32_t h, cudaStream_t stream);

// out[i] = in[i] * factor for f32 arrays (in may equal out). Kept for callers with raw pointers.
void launch_scale(const float* in, float* out, int64_t n, float factor, cudaStream_t stream);

}  // namespace shardcheck::gpu
