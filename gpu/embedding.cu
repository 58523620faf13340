// Embedding forward and backward. The backward is deterministic without atomics or scratch:
// one warp owns a vocab row v and 256 columns (8 per lane), scans all tokens 32 at a time, and takes the
// matching ones (a ballot mask, lowest bit first) in token order, accumulating in registers:
// each 64-token chunk into its own sum, added to the row's total when the chunk ends (core's
// chunked order, core/kernels/summation_order.hpp).
// Work is V x ceil(H/256) warps x N/32 ballots plus N x H additions: at TinyLM sizes the
// scan is small, and still linear in the work for large vocabularies (a sort by token would
// save it). Eight columns per lane make the scan 8 times shorter than one column per lane.
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

constexpr int kLaneCols = 8;                   // columns per lane
constexpr int64_t kWarpCols = 32 * kLaneCols;  // columns per warp

// Warp w of the grid owns row v = w / tiles and columns [kWarpCols * (w % tiles), +kWarpCols):
// lane l holds columns base + 32k + l for k < kLaneCols (each load is coalesced over the warp).
__global__ void embedding_backward_kernel(Operand tokens, Operand dout, Operand dweight, int64_t vocab,
                                          int64_t hidden, bool round_bf16) {
  const int64_t tiles = (hidden + kWarpCols - 1) / kWarpCols;
  const int64_t warp = dev::thread_index() / 32;
  if (warp >= vocab * tiles) return;  // whole warps only: the grid is a multiple of 32 threads
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t v = warp / tiles, j0 = (warp % tiles) * kWarpCols + lane;
  const int32_t* tok = static_cast<const int32_t*>(tokens.ptr);
  const int64_t n_tokens = tokens.numel;
  float total[kLaneCols], acc[kLaneCols];  // acc: the current chunk's sums
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) total[k] = acc[k] = 0.0f;
  bool corrupted = false;
  for (int64_t n0 = 0; n0 < n_tokens && !corrupted; n0 += 32) {
    const int64_t n = n0 + lane;
    const int32_t t = n < n_tokens ? tok[n] : 0;
    corrupted = __any_sync(kFullMask, t < 0 || t >= vocab);  // uniform across the warp
    unsigned match = __ballot_sync(kFullMask, n < n_tokens && t == v);
    while (match != 0) {  // increasing n: the CPU's token order
      const int64_t row = (n0 + __ffs(match) - 1) * hidden;
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) {
        if (j0 + 32 * k < hidden) acc[k] = __fadd_rn(acc[k], dev::loadf(dout, row + j0 + 32 * k));
      }
      match &= match - 1;
    }
    if ((n0 + 32) % core::kSumChunkRows == 0 || n0 + 32 >= n_tokens) {  // the chunk ends
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) {
        total[k] = __fadd_rn(total[k], acc[k]);
        acc[k] = 0.0f;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) {
    const int64_t j = j0 + 32 * k;
    const float sum = round_bf16 ? dev::round_bf16(total[k]) : total[k];
    if (j < hidden) dev::storef(dweight, v * hidden + j, corrupted ? dev::quiet_nan() : sum);
  }
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
                               bool round_bf16, cudaStream_t stream) {
  if (dweight.numel == 0) return;
  const int64_t threads = vocab * ((hidden + kWarpCols - 1) / kWarpCols) * 32;
  const int64_t blocks = (threads + dev::kBlock - 1) / dev::kBlock;  // one warp per item: no grid stride
  if (blocks > 0x7fffffff) throw CudaError("embedding_backward: vocab x hidden is too large for one grid");
  embedding_backward_kernel<<<static_cast<unsigned>(blocks), dev::kBlock, 0, stream>>>(
      tokens, dout, dweight, vocab, hidden, round_bf16);
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu
