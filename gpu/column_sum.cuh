// Column sums on the GPU in core's one summation order (core/kernels/summation_order.hpp):
// 64-row chunks summed in row order, then the chunk sums in chunk order. A block owns a tile of
// kTileCols columns; its kChunkSlots rows of threads each sum one chunk of every column in
// the tile (a warp reads 32 adjacent columns of one row: coalesced), then one thread per
// column adds the chunk sums in chunk order. The same additions as the CPU, in parallel over
// chunks: rows / 64 independent sums per column instead of one.
//   column_sums<2>(rows, cols, [&](int64_t n, int64_t j, float (&v)[2]) { ... }, total);
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/summation_order.hpp"
#include "gpu/device_util.cuh"

namespace shardcheck::gpu::dev {

constexpr int kTileCols = 32;    // one warp's width: a warp reads 32 adjacent columns of a row
constexpr int kChunkSlots = 16;  // chunks summed at once by one block
constexpr int kColumnSumThreads = kTileCols * kChunkSlots;
constexpr int64_t kChunkRows = core::kSumChunkRows;
static_assert(kChunkRows % kSerialBatch == 0, "a chunk is whole batches of loads");

// Blocks for a column-sum launch: one per tile of kTileCols columns (at least 1).
inline unsigned column_sum_blocks(int64_t cols) {
  const int64_t tiles = (cols + kTileCols - 1) / kTileCols;
  if (tiles > 0x7fffffff) throw CudaError("column sum: more column tiles than one grid holds");
  return static_cast<unsigned>(tiles < 1 ? 1 : tiles);
}

// Launch with column_sum_blocks(cols) blocks of dim3(kTileCols, kChunkSlots) threads. term(n,
// j, v) writes the kOut values row n adds to column j. Returns true in the one thread per
// column that holds the column's kOut totals in `total` (threadIdx.y == 0, j < cols), where
// the caller stores them. Every thread of the block must call it (it synchronizes).
template <int kOut, class Term>
__device__ bool column_sums(int64_t rows, int64_t cols, Term term, float (&total)[kOut]) {
  __shared__ float chunk_sums[kOut][kChunkSlots][kTileCols];
  const int64_t j = int64_t{blockIdx.x} * kTileCols + threadIdx.x;
  const int slot = static_cast<int>(threadIdx.y);
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  for (int o = 0; o < kOut; ++o) total[o] = 0.0f;
  for (int64_t first = 0; first < chunks; first += kChunkSlots) {  // uniform across the block
    float acc[kOut];
    for (int o = 0; o < kOut; ++o) acc[o] = 0.0f;
    const int64_t chunk = first + slot;
    if (j < cols && chunk < chunks) {
      const int64_t begin = chunk * kChunkRows;
      const int64_t end = begin + kChunkRows < rows ? begin + kChunkRows : rows;
      int64_t n = begin;
      for (; n + kSerialBatch <= end; n += kSerialBatch) {  // every load of a batch, then the adds in order
        float v[kSerialBatch][kOut];
#pragma unroll
        for (int b = 0; b < kSerialBatch; ++b) term(n + b, j, v[b]);
#pragma unroll
        for (int b = 0; b < kSerialBatch; ++b) {
#pragma unroll
          for (int o = 0; o < kOut; ++o) acc[o] = __fadd_rn(acc[o], v[b][o]);
        }
      }
      for (; n < end; ++n) {
        float v[kOut];
        term(n, j, v);
#pragma unroll
        for (int o = 0; o < kOut; ++o) acc[o] = __fadd_rn(acc[o], v[o]);
      }
    }
    for (int o = 0; o < kOut; ++o) chunk_sums[o][slot][threadIdx.x] = acc[o];
    __syncthreads();
    if (slot == 0) {
      const int64_t here = chunks - first < kChunkSlots ? chunks - first : kChunkSlots;
      for (int s = 0; s < here; ++s) {  // chunk order
        for (int o = 0; o < kOut; ++o) total[o] = __fadd_rn(total[o], chunk_sums[o][s][threadIdx.x]);
      }
    }
    __syncthreads();  // the sums are read before the next group overwrites them
  }
  return slot == 0 && j < cols;
}

}  // namespace shardcheck::gpu::dev
