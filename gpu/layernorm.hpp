// LayerNorm forward and backward (core::kernel::LayerNormForward / LayerNormBackward), bit for
// bit with the CPU reference: each row's sums run in one thread in the CPU's order (h = 0..H-1),
// each column's sums over rows in core's chunked order (core/kernels/summation_order.hpp),
// and everything else is elementwise.
//   gpu::launch_layernorm_forward(x, gamma, beta, y, mean, rstd, rows, hidden, 1e-5f, stream);
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/operand.hpp"

namespace shardcheck::gpu {

// y = ((x - mean) * rstd) * gamma + beta per row; mean and rstd are written too. y may be x.
void launch_layernorm_forward(Operand x, Operand gamma, Operand beta, Operand y, Operand mean, Operand rstd,
                              int64_t rows, int64_t hidden, float eps, cudaStream_t stream);
// dx, dgamma, dbeta as core::kernel::LayerNormBackward defines them. dx may be dy or x: the
// column sums (dgamma, dbeta) run first, and each row reads its inputs before writing dx.
// scratch: layernorm_backward_scratch_bytes(rows, hidden) bytes of device memory used in
// `stream`'s order (the column sums' chunk sums). round_bf16: dgamma and dbeta rounded to bf16
// precision before they are stored.
size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t hidden);
void launch_layernorm_backward(Operand dy, Operand x, Operand gamma, Operand mean, Operand rstd, Operand dx,
                               Operand dgamma, Operand dbeta, int64_t rows, int64_t hidden, bool round_bf16,
                               void* scratch, cudaStream_t stream);

}  // namespace shardcheck::gpu
