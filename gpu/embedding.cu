// Embedding forward and backward. The backward is deterministic without atomics or scratch:
// one warp owns a vocab row v and 32 columns, scans all tokens 32 at a time, and takes the
// matching ones (a ballot mask, lowest bit first) in token order, accumulating in registers:
// each 64-token chunk into its own sum, added to the row's total when the chunk ends (core's
// chunked order, core/kernels/summation_order.hpp).
// Work is V x ceil(H/32) warps x N/32 ballots plus N x H additions: trivial at TinyLM sizes,
// and still linear in the work for large vocabularies (a sort by token would save the scan).
#include "core/kernels/summation_order.hpp"
#include "gpu/device_util.cuh"
#include "gpu/embedding.hpp"

namespace shardcheck::gpu {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
static_assert(core::kSumChunkRows % 32 == 0, "a chunk is whole ballots of 32 tokens");

__global__ void embedding_forward_kernel(Operand tokens, Operand weight, Operand out, int64_t vocab,
                                         int64_t hidden) {
  const int32_t* tok = static_cast<const int32_t*>(tokens.ptr);
  for (int64_t i = dev::thread_index(); i < out.numel; i += dev::grid_stride()) {
    const int64_t n = i / hidden, j = i % hidden;
    const int32_t t = tok[n];
    const bool valid = t >= 0 && t < vocab;
    dev::storef(out, i, valid ? dev::loadf(weight, t * hidden + j) : dev::quiet_nan());
  }
}

// Warp w of the grid owns row v = w / chunks and columns [32 * (w % chunks), +32).
__global__ void embedding_backward_kernel(Operand tokens, Operand dout, Operand dweight, int64_t vocab,
                                          int64_t hidden) {
  const int64_t chunks = (hidden + 31) / 32;
  const int64_t warp = dev::thread_index() / 32;
  if (warp >= vocab * chunks) return;  // whole warps only: the grid is a multiple of 32 threads
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t v = warp / chunks, j = (warp % chunks) * 32 + lane;
  const int32_t* tok = static_cast<const int32_t*>(tokens.ptr);
  const int64_t n_tokens = tokens.numel;
  float total = 0.0f, acc = 0.0f;  // acc: the current chunk's sum
  bool corrupted = false;
  for (int64_t n0 = 0; n0 < n_tokens && !corrupted; n0 += 32) {
    const int64_t n = n0 + lane;
    const int32_t t = n < n_tokens ? tok[n] : 0;
    corrupted = __any_sync(kFullMask, t < 0 || t >= vocab);  // uniform across the warp
    unsigned match = __ballot_sync(kFullMask, n < n_tokens && t == v);
    while (match != 0 && j < hidden) {  // increasing n: the CPU's token order
      const int b = __ffs(match) - 1;
      acc = __fadd_rn(acc, dev::loadf(dout, (n0 + b) * hidden + j));
      match &= match - 1;
    }
    if ((n0 + 32) % core::kSumChunkRows == 0 || n0 + 32 >= n_tokens) {  // the chunk ends
      total = __fadd_rn(total, acc);
      acc = 0.0f;
    }
  }
  if (j < hidden) dev::storef(dweight, v * hidden + j, corrupted ? dev::quiet_nan() : total);
}

}  // namespace

void launch_embedding_forward(Operand tokens, Operand weight, Operand out, int64_t vocab, int64_t hidden,
                              cudaStream_t stream) {
  if (out.numel == 0) return;
  embedding_forward_kernel<<<dev::grid_for(out.numel), dev::kBlock, 0, stream>>>(tokens, weight, out, vocab,
                                                                                 hidden);
  SC_CUDA_CHECK_LAST();
}

void launch_embedding_backward(Operand tokens, Operand dout, Operand dweight, int64_t vocab, int64_t hidden,
                               cudaStream_t stream) {
  if (dweight.numel == 0) return;
  const int64_t threads = vocab * ((hidden + 31) / 32) * 32;
  const int64_t blocks = (threads + dev::kBlock - 1) / dev::kBlock;  // one warp per item: no grid stride
  if (blocks > 0x7fffffff) throw CudaError("embedding_backward: vocab x hidden is too large for one grid");
  embedding_backward_kernel<<<static_cast<unsigned>(blocks), dev::kBlock, 0, stream>>>(tokens, dout, dweight,
                                                                                       vocab, hidden);
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu
