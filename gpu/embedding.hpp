// Token embedding, forward and backward (core::kernel::EmbeddingForward / EmbeddingBackward).
// Both match the CPU reference bit for bit: the forward copies rows, and the backward sums
// each dweight element's tokens in token order, with no atomics.
//   gpu::launch_embedding_backward(tokens, dout, dweight, vocab, hidden, /*round_bf16=*/false, stream);
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/operand.hpp"

namespace shardcheck::gpu {

// out[n] = weight[tokens[n]] (rows of `hidden`); a token outside [0, vocab) gives a NaN row.
void launch_embedding_forward(Operand tokens, Operand weight, Operand out, int64_t vocab, int64_t hidden,
                              cudaStream_t stream);
// dweight[v] = sum over n with tokens[n] == v, in increasing n, of dout[n] (fp32, rounded
// once, after a rounding to bf16 precision when round_bf16); any token outside [0, vocab)
// makes all of dweight NaN, as on the CPU.
void launch_embedding_backward(Operand tokens, Operand dout, Operand dweight, int64_t vocab, int64_t hidden,
                               bool round_bf16, cudaStream_t stream);

}  // namespace shardcheck::gpu
