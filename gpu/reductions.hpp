// Reductions: BiasGrad (column sums, bit for bit with the CPU: core's chunked order,
// gpu/column_sum.cuh), SumSquares (f64, core's fixed two-level tree, the CPU's additions: bit
// for bit) and ClipCoef (one thread, bit for bit).
//   gpu::launch_sum_squares(x, acc_in_or_null, acc_out, partials, stream);
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/operand.hpp"

namespace shardcheck::gpu {

// dbias[c] = sum over r of dy[r][c] in fp32, in core's chunked order (summation_order.hpp),
// rounded to bf16 precision before it is stored when round_bf16 (core::kernel::BiasGrad).
// scratch: bias_grad_scratch_bytes(rows, cols) bytes of device memory used in `stream`'s order.
size_t bias_grad_scratch_bytes(int64_t rows, int64_t cols);
void launch_bias_grad(Operand dy, Operand dbias, int64_t rows, int64_t cols, bool round_bf16, void* scratch,
                      cudaStream_t stream);

// Device scratch that launch_sum_squares needs: one double per first-level block.
constexpr int64_t kSumSquaresPartials = 1024;
// *acc_out = (acc_in ? *acc_in : 0.0) + sum of (double)x[i]^2. acc_in may equal acc_out.
// partials: kSumSquaresPartials doubles of device scratch.
void launch_sum_squares(Operand x, const double* acc_in, double* acc_out, double* partials,
                        cudaStream_t stream);

// *norm = sqrt(*sumsq); *coef = max_norm > 0 ? min(1, max_norm / (norm + 1e-6)) : 1.
void launch_clip_coef(const double* sumsq, double* coef, double* norm, double max_norm, cudaStream_t stream);

}  // namespace shardcheck::gpu
