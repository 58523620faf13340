// Column sums on the GPU in core's one summation order (core/kernels/summation_order.hpp):
// 64-row chunks summed in row order, then the chunk sums in chunk order. Two kernels:
//  1. one block per (tile of kTileCols columns, chunk): its kTileCols x kTileRows threads
//     compute the chunk's terms into shared memory (a warp reads 32 adjacent columns of a row:
//     coalesced), then one thread per column adds its chunk's 64 terms in row order and
//     writes the chunk sum to scratch;
//  2. one thread per column adds the chunk sums in chunk order and stores the totals.
// The same additions as the CPU, in parallel over every (chunk, column) pair: a matrix of
// 2048 rows gives 32 blocks per tile of columns instead of one.
//   struct Term { ... __device__ void operator()(int64_t n, int64_t j, float (&v)[kOut]) const; };
//   launch_column_sums<kOut>(rows, cols, Term{...}, outputs, scratch, stream);
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/summation_order.hpp"
#include "gpu/check.hpp"
#include "gpu/device_util.cuh"
#include "gpu/operand.hpp"

namespace shardcheck::gpu::dev {

constexpr int kTileCols = 32;  // one warp's width: a warp reads 32 adjacent columns of a row
constexpr int kTileRows = 8;   // rows of threads computing a chunk's terms
constexpr int64_t kChunkRows = core::kSumChunkRows;

inline int64_t column_chunks(int64_t rows) { return rows <= 0 ? 1 : (rows + kChunkRows - 1) / kChunkRows; }

// Bytes of scratch launch_column_sums needs: one float per output, column and chunk.
inline size_t column_sum_scratch_bytes(int kOut, int64_t rows, int64_t cols) {
  return sizeof(float) * static_cast<size_t>(kOut) * static_cast<size_t>(cols) *
         static_cast<size_t>(column_chunks(rows));
}

template <int kOut>
struct ColumnOutputs {
  Operand out[kOut];
  bool round_bf16 = false;  // each total rounded to bf16 precision before it is stored
};

// Block (tile, chunk): the chunk's terms of kTileCols columns, then each column's chunk sum in
// row order, into partial[(chunk * kOut + o) * cols + j].
template <int kOut, class Term>
__global__ void __launch_bounds__(kTileCols* kTileRows)
    column_chunk_kernel(int64_t rows, int64_t cols, Term term, float* partial) {
  __shared__ float terms[kOut][kChunkRows][kTileCols + 1];
  const int64_t j = int64_t{blockIdx.x} * kTileCols + threadIdx.x;
  const int64_t chunk = blockIdx.y, begin = chunk * kChunkRows;
  const int here = static_cast<int>(rows - begin < kChunkRows ? rows - begin : kChunkRows);
  for (int r = static_cast<int>(threadIdx.y); r < here; r += kTileRows) {
    float v[kOut];
    if (j < cols) {
      term(begin + r, j, v);
    } else {
      for (int o = 0; o < kOut; ++o) v[o] = 0.0f;
    }
    for (int o = 0; o < kOut; ++o) terms[o][r][threadIdx.x] = v[o];
  }
  __syncthreads();
  if (threadIdx.y != 0 || j >= cols) return;
  float acc[kOut];
  for (int o = 0; o < kOut; ++o) acc[o] = 0.0f;
  for (int r = 0; r < here; ++r) {  // row order
#pragma unroll
    for (int o = 0; o < kOut; ++o) acc[o] = __fadd_rn(acc[o], terms[o][r][threadIdx.x]);
  }
  for (int o = 0; o < kOut; ++o) partial[(chunk * kOut + o) * cols + j] = acc[o];
}

// One thread per column: the chunk sums in chunk order (from +0.0f, as the CPU's total).
template <int kOut>
__global__ void column_total_kernel(const float* partial, int64_t chunks, int64_t cols,
                                    ColumnOutputs<kOut> outs) {
  const int64_t j = thread_index();
  if (j >= cols) return;
  float total[kOut];
  for (int o = 0; o < kOut; ++o) total[o] = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
#pragma unroll
    for (int o = 0; o < kOut; ++o) total[o] = __fadd_rn(total[o], partial[(c * kOut + o) * cols + j]);
  }
  for (int o = 0; o < kOut; ++o) storef(outs.out[o], j, outs.round_bf16 ? round_bf16(total[o]) : total[o]);
}

// outs.out[o][j] = the chunked-order sum over rows n of term(n, j)[o]. `scratch` holds
// column_sum_scratch_bytes(kOut, rows, cols) bytes used in `stream`'s order.
template <int kOut, class Term>
void launch_column_sums(int64_t rows, int64_t cols, Term term, ColumnOutputs<kOut> outs, void* scratch,
                        cudaStream_t stream) {
  if (cols <= 0) return;
  const int64_t tiles = (cols + kTileCols - 1) / kTileCols, chunks = column_chunks(rows);
  if (tiles > 0x7fffffff || chunks > 65535)
    throw CudaError("column sum: more tiles or chunks than one grid holds");
  float* partial = static_cast<float*>(scratch);
  if (rows > 0) {
    column_chunk_kernel<kOut, Term><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)),
                                      dim3(kTileCols, kTileRows), 0, stream>>>(rows, cols, term, partial);
    SC_CUDA_CHECK_LAST();
  } else {
    SC_CUDA_CHECK(cudaMemsetAsync(partial, 0, column_sum_scratch_bytes(kOut, rows, cols), stream));
  }
  column_total_kernel<kOut><<<grid_for(cols), kBlock, 0, stream>>>(partial, chunks, cols, outs);
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu::dev
