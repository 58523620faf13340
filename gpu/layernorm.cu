// LayerNorm. The CPU sums a row left to right in one float, and we want its bits, so one
// thread per row does the sums (2H dependent additions; H is small here) while the rest of
// the row's block waits at a barrier and then writes the outputs in parallel. Rows of up to
// kStagedRowMax elements are first staged in shared memory by the whole block (the loads, and
// the elementwise products the sums add, in parallel), so the one thread's additions wait on
// shared memory rather than on a global load per batch; wider rows read global memory. The backward's
// dgamma/dbeta are column sums in core's chunked order (gpu/column_sum.cuh): one block per
// (32 columns, 64-row chunk), then one thread per column adds the chunk sums in order.
// Chosen over a parallel tree reduction (faster for very wide rows, but only close to the CPU,
// not equal) because bitwise agreement is what the checker compares; TinyLM rows are short.
#include "gpu/column_sum.cuh"
#include "gpu/device_util.cuh"
#include "gpu/layernorm.hpp"

namespace shardcheck::gpu {

namespace {

// Threads per row block: the row's width rounded up to whole warps, at most dev::kBlock.
int row_block(int64_t hidden) {
  const int64_t warps = (hidden + 31) / 32;
  return static_cast<int>(warps * 32 < dev::kBlock ? warps * 32 : dev::kBlock);
}

// Rows this wide or narrower are staged in shared memory: two arrays of floats, 32 KiB.
constexpr int64_t kStagedRowMax = 4096;

size_t staged_bytes(int64_t hidden) { return 2 * static_cast<size_t>(hidden) * sizeof(float); }

// v[0] + v[1] + ... + v[n-1] from +0.0f, in order: the CPU's row sum.
__device__ float sum_in_order(const float* v, int64_t n) {
  float s = 0.0f;
#pragma unroll 16
  for (int64_t j = 0; j < n; ++j) s = __fadd_rn(s, v[j]);
  return s;
}

// Block n handles row n, staged in shared memory (hidden <= kStagedRowMax): the block loads x
// and, once thread 0 has mu, the squares (x-mu)^2; thread 0 adds each array in order.
__global__ void layernorm_forward_staged_kernel(Operand x, Operand gamma, Operand beta, Operand y,
                                                Operand mean, Operand rstd, int64_t hidden, float eps) {
  extern __shared__ float staged[];  // xs[hidden], then squares[hidden]
  float* xs = staged;
  float* squares = staged + hidden;
  __shared__ float row_stats[2];
  const int64_t n = blockIdx.x, base = n * hidden;
  const float hf = static_cast<float>(hidden);
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) xs[j] = dev::loadf(x, base + j);
  __syncthreads();  // every read of x happens before any write of y (y may be x)
  if (threadIdx.x == 0) row_stats[0] = __fdiv_rn(sum_in_order(xs, hidden), hf);
  __syncthreads();
  const float mu = row_stats[0];
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float d = __fsub_rn(xs[j], mu);
    squares[j] = __fmul_rn(d, d);
  }
  __syncthreads();
  if (threadIdx.x == 0)
    row_stats[1] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum_in_order(squares, hidden), hf), eps)));
  __syncthreads();
  const float rs = row_stats[1];
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float xhat = __fmul_rn(__fsub_rn(xs[j], mu), rs);
    dev::storef(y, base + j, __fadd_rn(__fmul_rn(xhat, dev::loadf(gamma, j)), dev::loadf(beta, j)));
  }
  if (threadIdx.x == 0) {
    dev::storef(mean, n, mu);  // rounded to their dtype after y used the float values
    dev::storef(rstd, n, rs);
  }
}

// Block n handles row n. Thread 0: mu = sum(x)/H, var = sum((x-mu)^2)/H, rs = 1/sqrt(var+eps).
__global__ void layernorm_forward_kernel(Operand x, Operand gamma, Operand beta, Operand y, Operand mean,
                                         Operand rstd, int64_t hidden, float eps) {
  __shared__ float row_stats[2];
  const int64_t n = blockIdx.x, base = n * hidden;
  const float hf = static_cast<float>(hidden);
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    int64_t j = 0;
    for (; j + dev::kSerialBatch <= hidden; j += dev::kSerialBatch) {
      float v[dev::kSerialBatch];
#pragma unroll
      for (int b = 0; b < dev::kSerialBatch; ++b) v[b] = dev::loadf(x, base + j + b);
#pragma unroll
      for (int b = 0; b < dev::kSerialBatch; ++b) sum = __fadd_rn(sum, v[b]);
    }
    for (; j < hidden; ++j) sum = __fadd_rn(sum, dev::loadf(x, base + j));
    const float mu = __fdiv_rn(sum, hf);
    float sq = 0.0f;
    for (j = 0; j + dev::kSerialBatch <= hidden; j += dev::kSerialBatch) {
      float v[dev::kSerialBatch];
#pragma unroll
      for (int b = 0; b < dev::kSerialBatch; ++b) v[b] = dev::loadf(x, base + j + b);
#pragma unroll
      for (int b = 0; b < dev::kSerialBatch; ++b) {
        const float d = __fsub_rn(v[b], mu);
        sq = __fadd_rn(sq, __fmul_rn(d, d));
      }
    }
    for (; j < hidden; ++j) {
      const float d = __fsub_rn(dev::loadf(x, base + j), mu);
      sq = __fadd_rn(sq, __fmul_rn(d, d));
    }
    const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sq, hf), eps)));
    row_stats[0] = mu;
    row_stats[1] = rs;
  }
  __syncthreads();  // every read of the row above happens before any write of y (y may be x)
  const float mu = row_stats[0], rs = row_stats[1];
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float xhat = __fmul_rn(__fsub_rn(dev::loadf(x, base + j), mu), rs);
    dev::storef(y, base + j, __fadd_rn(__fmul_rn(xhat, dev::loadf(gamma, j)), dev::loadf(beta, j)));
  }
  if (threadIdx.x == 0) {
    dev::storef(mean, n, mu);  // rounded to their dtype after y used the float values
    dev::storef(rstd, n, rs);
  }
}

// dgamma[j] = sum_n dy*xhat, dbeta[j] = sum_n dy, in the chunked order; xhat from the stored
// mean/rstd.
struct LayerNormColumnTerm {
  Operand dy, x, mean, rstd;
  int64_t hidden;
  __device__ void operator()(int64_t n, int64_t j, float (&v)[2]) const {
    const float d = dev::loadf(dy, n * hidden + j);
    const float xhat =
        __fmul_rn(__fsub_rn(dev::loadf(x, n * hidden + j), dev::loadf(mean, n)), dev::loadf(rstd, n));
    v[0] = __fmul_rn(d, xhat);
    v[1] = d;
  }
};

// Block n handles row n, staged (hidden <= kStagedRowMax): the block computes g = dy*gamma and
// g*xhat into shared memory, thread 0 adds each in order, then dx as in layernorm_rows_kernel.
// Each thread reads x and dy at its own j's and later writes dx only there (dx may be dy or x).
__global__ void layernorm_rows_staged_kernel(Operand dy, Operand x, Operand gamma, Operand mean, Operand rstd,
                                             Operand dx, int64_t hidden) {
  extern __shared__ float staged[];  // g[hidden], then g*xhat[hidden]
  float* g = staged;
  float* gx = staged + hidden;
  __shared__ float row_means[2];
  const int64_t n = blockIdx.x, base = n * hidden;
  const float mu = dev::loadf(mean, n), rs = dev::loadf(rstd, n);
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float xhat = __fmul_rn(__fsub_rn(dev::loadf(x, base + j), mu), rs);
    g[j] = __fmul_rn(dev::loadf(dy, base + j), dev::loadf(gamma, j));
    gx[j] = __fmul_rn(g[j], xhat);
  }
  __syncthreads();
  const float hf = static_cast<float>(hidden);
  if (threadIdx.x == 0) row_means[0] = __fdiv_rn(sum_in_order(g, hidden), hf);
  if (threadIdx.x == 32 % blockDim.x) row_means[1] = __fdiv_rn(sum_in_order(gx, hidden), hf);  // another warp
  __syncthreads();
  const float mean_g = row_means[0], mean_gx = row_means[1];
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float xhat = __fmul_rn(__fsub_rn(dev::loadf(x, base + j), mu), rs);
    dev::storef(dx, base + j, __fmul_rn(rs, __fsub_rn(__fsub_rn(g[j], mean_g), __fmul_rn(xhat, mean_gx))));
  }
}

// Block n handles row n: thread 0 sums g = dy*gamma and g*xhat over h in order; then
// dx = rs * ((g - mean(g)) - xhat * mean(g*xhat)) elementwise.
__global__ void layernorm_rows_kernel(Operand dy, Operand x, Operand gamma, Operand mean, Operand rstd,
                                      Operand dx, int64_t hidden) {
  __shared__ float row_means[2];
  const int64_t n = blockIdx.x, base = n * hidden;
  const float mu = dev::loadf(mean, n), rs = dev::loadf(rstd, n);
  if (threadIdx.x == 0) {
    float sum_g = 0.0f, sum_gx = 0.0f;
    auto xhat_at = [&](int64_t j) { return __fmul_rn(__fsub_rn(dev::loadf(x, base + j), mu), rs); };
    auto g_at = [&](int64_t j) { return __fmul_rn(dev::loadf(dy, base + j), dev::loadf(gamma, j)); };
    int64_t j = 0;
    for (; j + dev::kSerialBatch <= hidden;
         j += dev::kSerialBatch) {  // every load first, then the sums in order
      float xv[dev::kSerialBatch], dv[dev::kSerialBatch], gv[dev::kSerialBatch];
#pragma unroll
      for (int b = 0; b < dev::kSerialBatch; ++b) {
        xv[b] = dev::loadf(x, base + j + b);
        dv[b] = dev::loadf(dy, base + j + b);
        gv[b] = dev::loadf(gamma, j + b);
      }
#pragma unroll
      for (int b = 0; b < dev::kSerialBatch; ++b) {
        const float xhat = __fmul_rn(__fsub_rn(xv[b], mu), rs), g = __fmul_rn(dv[b], gv[b]);
        sum_g = __fadd_rn(sum_g, g);
        sum_gx = __fadd_rn(sum_gx, __fmul_rn(g, xhat));
      }
    }
    for (; j < hidden; ++j) {
      const float xhat = xhat_at(j), g = g_at(j);
      sum_g = __fadd_rn(sum_g, g);
      sum_gx = __fadd_rn(sum_gx, __fmul_rn(g, xhat));
    }
    const float hf = static_cast<float>(hidden);
    row_means[0] = __fdiv_rn(sum_g, hf);
    row_means[1] = __fdiv_rn(sum_gx, hf);
  }
  __syncthreads();  // the row is read in full before dx (which may be dy or x) is written
  const float mean_g = row_means[0], mean_gx = row_means[1];
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float xhat = __fmul_rn(__fsub_rn(dev::loadf(x, base + j), mu), rs);
    const float g = __fmul_rn(dev::loadf(dy, base + j), dev::loadf(gamma, j));
    dev::storef(dx, base + j, __fmul_rn(rs, __fsub_rn(__fsub_rn(g, mean_g), __fmul_rn(xhat, mean_gx))));
  }
}

void check_rows(int64_t rows) {
  if (rows > 0x7fffffff) throw CudaError("layernorm: more rows than one grid holds");
}

}  // namespace

void launch_layernorm_forward(Operand x, Operand gamma, Operand beta, Operand y, Operand mean, Operand rstd,
                              int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  check_rows(rows);
  if (hidden <= kStagedRowMax) {
    layernorm_forward_staged_kernel<<<static_cast<unsigned>(rows), row_block(hidden), staged_bytes(hidden),
                                      stream>>>(x, gamma, beta, y, mean, rstd, hidden, eps);
  } else {
    layernorm_forward_kernel<<<static_cast<unsigned>(rows), row_block(hidden), 0, stream>>>(
        x, gamma, beta, y, mean, rstd, hidden, eps);
  }
  SC_CUDA_CHECK_LAST();
}

size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t hidden) {
  return dev::column_sum_scratch_bytes(2, rows, hidden);
}

void launch_layernorm_backward(Operand dy, Operand x, Operand gamma, Operand mean, Operand rstd, Operand dx,
                               Operand dgamma, Operand dbeta, int64_t rows, int64_t hidden, bool round_bf16,
                               void* scratch, cudaStream_t stream) {
  check_rows(rows);
  // Columns first: they read dy and x of every row, which the row kernel may overwrite.
  dev::launch_column_sums<2>(rows, hidden, LayerNormColumnTerm{dy, x, mean, rstd, hidden},
                             dev::ColumnOutputs<2>{{dgamma, dbeta}, round_bf16}, scratch, stream);
  if (rows == 0) return;
  if (hidden <= kStagedRowMax) {
    layernorm_rows_staged_kernel<<<static_cast<unsigned>(rows), row_block(hidden), staged_bytes(hidden),
                                   stream>>>(dy, x, gamma, mean, rstd, dx, hidden);
  } else {
    layernorm_rows_kernel<<<static_cast<unsigned>(rows), row_block(hidden), 0, stream>>>(dy, x, gamma, mean,
                                                                                         rstd, dx, hidden);
  }
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu
