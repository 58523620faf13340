// Softmax cross-entropy: one block per row, then one thread for the mean over rows.
// Per row, three passes over the logits: the max (exact in any order), the sum of
// e = expf(l - max) (per-thread strided sums, then a fixed shared-memory tree), and the
// outputs p = e / s (e recomputed, bit-identical). The barriers inside the reductions put all
// reads of the row before any write of dlogits, so dlogits may be logits.
#include "gpu/device_util.cuh"
#include "gpu/softmax.hpp"

namespace shardcheck::gpu {

namespace {

constexpr int kRowBlock = 256;

// Reduces one value per thread with a fixed tree (halving strides), deterministic; all
// threads get the result. `combine` must be the same for every call site's type.
template <class F>
__device__ float block_reduce(float v, float* shared, F combine) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kRowBlock / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      shared[threadIdx.x] = combine(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();  // shared is reused by the next reduction
  return result;
}

__global__ void softmax_rows_kernel(Operand logits, Operand targets, Operand dlogits, int64_t vocab,
                                    float scale, float* row_loss) {
  __shared__ float shared[kRowBlock];
  const int64_t n = blockIdx.x, base = n * vocab;
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < vocab; v += kRowBlock) {
    const float l = dev::loadf(logits, base + v);
    mx = l > mx ? l : mx;  // the CPU's comparison: NaNs never become the max
  }
  mx = block_reduce(mx, shared, [](float a, float b) { return b > a ? b : a; });
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < vocab; v += kRowBlock) sum += expf(dev::loadf(logits, base + v) - mx);
  sum = block_reduce(sum, shared, [](float a, float b) { return a + b; });
  const int32_t t = static_cast<const int32_t*>(targets.ptr)[n];
  const bool valid = t >= 0 && t < vocab;
  for (int64_t v = threadIdx.x; v < vocab; v += kRowBlock) {
    const float p = __fdiv_rn(expf(dev::loadf(logits, base + v) - mx), sum);
    if (valid && v == t) row_loss[n] = -logf(p);
    dev::storef(dlogits, base + v, valid ? (p - (v == t ? 1.0f : 0.0f)) * scale : dev::quiet_nan());
  }
  if (!valid && threadIdx.x == 0) row_loss[n] = dev::quiet_nan();
}

// loss = (sum of row losses, rows in order, from +0.0f) / rows: the CPU's order exactly.
__global__ void mean_loss_kernel(const float* row_loss, int64_t rows, float* loss) {
  float total = 0.0f;
  int64_t n = 0;
  for (; n + dev::kSerialBatch <= rows; n += dev::kSerialBatch) {
    float v[dev::kSerialBatch];
#pragma unroll
    for (int b = 0; b < dev::kSerialBatch; ++b) v[b] = row_loss[n + b];
#pragma unroll
    for (int b = 0; b < dev::kSerialBatch; ++b) total += v[b];
  }
  for (; n < rows; ++n) total += row_loss[n];
  *loss = __fdiv_rn(total, static_cast<float>(rows));
}

}  // namespace

void launch_softmax_cross_entropy(Operand logits, Operand targets, Operand dlogits, Operand loss,
                                  int64_t rows, int64_t vocab, float grad_scale, float* row_loss_scratch,
                                  cudaStream_t stream) {
  if (rows > 0x7fffffff) throw CudaError("softmax_cross_entropy: more rows than one grid holds");
  softmax_rows_kernel<<<static_cast<unsigned>(rows), kRowBlock, 0, stream>>>(logits, targets, dlogits, vocab,
                                                                             grad_scale, row_loss_scratch);
  SC_CUDA_CHECK_LAST();
  mean_loss_kernel<<<1, 1, 0, stream>>>(row_loss_scratch, rows, static_cast<float*>(loss.ptr));
  SC_CUDA_CHECK_LAST();
}

}  // namespace shardcheck::gpu
