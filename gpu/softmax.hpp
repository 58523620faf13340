// Softmax cross-entropy (core::kernel::SoftmaxCrossEntropy): dlogits and the mean loss. Each
// row's sum of exponentials is a fixed tree over the block's threads (deterministic from run
// to run, but not the CPU's left-to-right order), and expf/logf are CUDA's, so tests compare
// with a tolerance. The mean loss sums the row losses in row order in one thread, as the CPU does.
//   gpu::launch_softmax_cross_entropy(logits, targets, dlogits, loss, rows, vocab, 1.0f / rows,
//                                     row_loss_scratch, stream);
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/operand.hpp"

namespace shardcheck::gpu {

// dlogits may be logits. row_loss_scratch: `rows` floats of device scratch (overwritten). A
// target outside [0, vocab) makes its row's dlogits and the loss NaN, as on the CPU.
void launch_softmax_cross_entropy(Operand logits, Operand targets, Operand dlogits, Operand loss,
                                  int64_t rows, int64_t vocab, float grad_scale, float* row_loss_scratch,
                                  cudaStream_t stream);

}  // namespace shardcheck::gpu
