// Reductions without atomics. SumSquares runs core's fixed tree (core/kernels/summation_order.hpp),
// the CPU's additions exactly: G = fixed_tree_blocks(n) blocks of 256 threads; thread t of
// block b sums x[b*256 + t], then every G*256-th element after it, in order; each block reduces
// its 256 sums with a halving tree into partials[b]; one final block sums the G partials the
// same way (strided per thread, then a tree) and adds the previous acc. Same n, same bits.
#include "gpu/column_sum.cuh"
#include "gpu/device_util.cuh"
#include "gpu/reductions.hpp"

namespace shardcheck::gpu {

namespace {

constexpr int kReduceBlock = static_cast<int>(core::kTreeBlock);
static_assert(kSumSquaresPartials == core::kTreeBlocksMax, "scratch for every first-level block");

// dbias[c] = sum_n dy[n][c] in core's chunked order (gpu/column_sum.cuh).
struct BiasColumnTerm {
  Operand dy;
  int64_t cols;
  __device__ void operator()(int64_t n, int64_t c, float (&v)[1]) const {
    v[0] = dev::loadf(dy, n * cols + c);
  }
};

// The halving tree over one value per thread; thread 0 gets the sum.
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kReduceBlock / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      shared[threadIdx.x] = __dadd_rn(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  return shared[0];
}

// Squares of f32/bf16 values are exact in double (as on the CPU); f64 squares round once.
__global__ void sum_squares_partials_kernel(Operand x, double* partials) {
  __shared__ double shared[kReduceBlock];
  double s = 0.0;
  for (int64_t i = dev::thread_index(); i < x.numel; i += dev::grid_stride()) {
    const double d = dev::load<double>(x.ptr, x.dtype, i);
    s = __dadd_rn(s, __dmul_rn(d, d));
  }
  const double block = block_sum(s, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = block;
}

__global__ void sum_squares_final_kernel(const double* partials, int n_partials, const double* acc_in,
                                         double* acc_out) {
  __shared__ double shared[kReduceBlock];
  double s = 0.0;
  for (int i = threadIdx.x; i < n_partials; i += kReduceBlock) s = __dadd_rn(s, partials[i]);
  const double sum = block_sum(s, shared);
  if (threadIdx.x == 0) *acc_out = __dadd_rn(acc_in != nullptr ? *acc_in : 0.0, sum);  // CPU: before + sum
}

// std::min(1.0, q) is (q < 1.0) ? q : 1.0, so a NaN q gives 1.
__global__ void clip_coef_kernel(const double* sumsq, double* coef, double* norm, double max_norm) {
  const double nrm = __dsqrt_rn(*sumsq);
  double c = 1.0;
  if (max_norm > 0) {
    const double q = __ddiv_rn(max_norm, __dadd_rn(nrm, 1e-6));
    c = q < 1.0 ? q : 1.0;
  }
  *coef = c;
  *norm = nrm;
}

}  // namespace

size_t bias_grad_scratch_bytes(int64_t rows, int64_t cols) {
  return dev::column_sum_scratch_bytes(1, rows, cols);
}

void launch_bias_grad(Operand dy, Operand dbias, int64_t rows, int64_t cols, bool round_bf16, void* scratch,
                      cudaStream_t stream) {
  dev::launch_column_sums<1>(rows, cols, BiasColumnTerm{dy, cols}, dev::ColumnOutputs<1>{{dbias}, round_bf16},
                             scratch, stream);
}

void launch_sum_squares(Operand x, const double* acc_in, double* acc_out, double* partials,
                        cudaStream_t stream) {
  const int blocks = static_cast<int>(core::fixed_tree_blocks(x.numel));
  if (blocks > 0) {
    sum_squares_partials_kernel<<<blocks, kReduceBlock, 0, stream>>>(x, partials);
    SC_CUDA_CHECK_LAST();
  }
  sum_squares_final_kernel<<<1, kReduceBlock, 0, stream>>>(partials, blocks, acc_in, acc_out);
  SC_CUDA_CHECK_LAST();
}

void launch_clip_coef(const double* sumsq, double* coef, double* norm, double max_norm, cudaStream_t stream) {
  clip_coef_kernel<<<1, 1, 0, stream>>>(sumsq, coef, norm, max_norm);
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu
