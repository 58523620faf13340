// cuBLASLt behind core::kernel::Gemm. Our matrices are row-major and cuBLASLt's are
// column-major; a row-major R x C matrix is the column-major C x R matrix (its transpose) with
// the same bytes. So row-major C = op(A) op(B) is computed as column-major
//   C^T (n x m) = op(B)^T (n x k) * op(A)^T (k x m):
// cuBLASLt's first operand is our B, with transa = trans_b; its second is our A, with
// transb = trans_a; every leading dimension is the stored matrix's row length.
#include <cublasLt.h>

#include <map>
#include <string>
#include <tuple>

#include "gpu/blas.hpp"
#include "gpu/check.hpp"
#include "gpu/device_util.cuh"
#include "gpu/elementwise.hpp"

namespace shardcheck::gpu {

namespace {

using core::DType;

void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call +
                  " failed: " + cublasLtGetStatusName(status) + ": " + cublasLtGetStatusString(status));
}
#define SC_CUBLAS_CHECK(call) cublas_check((call), #call, __FILE__, __LINE__)

// Owners of cuBLASLt's host-side descriptors, destroyed when the call has been enqueued.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  ~Layout() {
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  ~Preference() {
    if (d) cublasLtMatmulPreferenceDestroy(d);
  }
};

cudaDataType_t cuda_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// A column-major rows x cols matrix, packed (ld = rows).
void make_layout(Layout& l, DType t, int64_t rows, int64_t cols) {
  SC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.d, cuda_type(t), static_cast<uint64_t>(rows),
                                             static_cast<uint64_t>(cols), rows));
}

// The largest power of two (at most 256) dividing the address. cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told otherwise, and a TensorRef may start anywhere.
uint32_t alignment_of(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && addr % a != 0) a /= 2;
  return a;
}

void set_alignment(Preference& p, cublasLtMatmulPreferenceAttributes_t attr, const void* ptr) {
  const uint32_t a = alignment_of(ptr);
  SC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p.d, attr, &a, sizeof(a)));
}

// k == 0: every product is empty, so C = alpha * 0.0f (+ beta * C), as the CPU computes it.
__global__ void empty_product_kernel(Operand c, float alpha, float beta, bool reads_c) {
  for (int64_t i = dev::thread_index(); i < c.numel; i += dev::grid_stride()) {
    const float scaled = __fmul_rn(alpha, 0.0f);
    dev::storef(c, i, reads_c ? __fadd_rn(scaled, __fmul_rn(beta, dev::loadf(c, i))) : scaled);
  }
}

size_t padded(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

// Everything cublasLtMatmul needs for one kind of call, built once: the descriptors and the
// heuristic's algorithm (or that it had none).
struct Blas::Plan {
  MatmulDesc desc;
  Layout first, second, out;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
};

struct Blas::Plans {
  // m, n, k, trans_a, trans_b, dtypes a/b/c, alignments a/b/c.
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int, int, int, uint32_t, uint32_t, uint32_t>;
  std::map<Key, std::unique_ptr<Plan>> plans;
};

Blas::Blas(size_t initial_scratch_bytes)
    : plans_(std::make_unique<Plans>()), initial_scratch_bytes_(initial_scratch_bytes) {
  cublasLtHandle_t handle = nullptr;
  SC_CUBLAS_CHECK(cublasLtCreate(&handle));
  handle_ = handle;
}

Blas::~Blas() { release(); }

// Errors are ignored here: a destructor cannot throw, and the memory is gone either way.
void Blas::release() noexcept {
  for (StreamResources& r : streams_) {
    if (r.scratch != nullptr) cudaFree(r.scratch);
    if (r.workspace != nullptr) cudaFree(r.workspace);
  }
  streams_.clear();
  if (plans_) plans_->plans.clear();
  if (handle_ != nullptr) cublasLtDestroy(handle_);
  handle_ = nullptr;
}

Blas::StreamResources& Blas::resources(cudaStream_t stream) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (StreamResources& r : streams_) {
    if (r.stream == stream) return r;
  }
  StreamResources r{stream, nullptr, nullptr, 0};
  SC_CUDA_CHECK(cudaMalloc(&r.workspace, kWorkspaceBytes));
  if (initial_scratch_bytes_ > 0) {
    if (cudaError_t e = cudaMalloc(&r.scratch, initial_scratch_bytes_); e != cudaSuccess) {
      cudaFree(r.workspace);
      SC_CUDA_CHECK(e);
    }
    r.scratch_bytes = initial_scratch_bytes_;
  }
  streams_.push_back(r);
  return streams_.back();
}

void* Blas::scratch(size_t bytes, cudaStream_t stream) {
  StreamResources& r = resources(stream);
  if (bytes > r.scratch_bytes) {
    // Pending kernels on this stream may still use the old scratch; nothing else does.
    SC_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (r.scratch != nullptr) SC_CUDA_CHECK(cudaFree(r.scratch));
    r.scratch = nullptr;
    r.scratch_bytes = 0;
    const size_t grown = bytes > 2 * initial_scratch_bytes_ ? bytes : 2 * initial_scratch_bytes_;
    SC_CUDA_CHECK(cudaMalloc(&r.scratch, grown));
    r.scratch_bytes = grown;
  }
  return r.scratch;
}

void Blas::gemm(const Operand& a, const Operand& b, const Operand& c, const core::kernel::Gemm& g,
                cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return;
  const bool reads_c = g.beta != 0.0;
  if (g.k == 0) {
    empty_product_kernel<<<dev::grid_for(c.numel), dev::kBlock, 0, stream>>>(
        c, static_cast<float>(g.alpha), static_cast<float>(g.beta), reads_c);
    SC_CUDA_CHECK_LAST();
    return;
  }
  // cuBLASLt (compute 32F) takes bf16 x bf16 -> bf16 or f32, and f32 x f32 -> f32.
  const bool direct = a.dtype == b.dtype && (a.dtype == DType::bf16 || c.dtype == DType::f32);
  if (direct && matmul(a.ptr, a.dtype, b.ptr, b.dtype, c.ptr, c.dtype, g, stream)) return;
  // Any other mix, or a direct call with no algorithm for its operands' alignment: stage the
  // operands as f32 in (256-byte aligned) scratch. Widening bf16 is exact, and the f32 result
  // is rounded to bf16 once if C is bf16: the CPU's arithmetic, in cuBLASLt's order.
  const auto staged = [&](const Operand& o) { return direct || o.dtype != DType::f32; };
  const auto bytes = [&](const Operand& o) {
    return staged(o) ? padded(4 * static_cast<size_t>(o.numel)) : 0;
  };
  char* base = static_cast<char*>(scratch(bytes(a) + bytes(b) + bytes(c), stream));
  const auto stage = [&](const Operand& o, bool copy_in) {
    if (!staged(o)) return o.ptr;
    void* p = base;
    base += bytes(o);
    if (copy_in) launch_copy(o, Operand{p, o.numel, DType::f32}, stream);
    return p;
  };
  void* a32 = stage(a, true);
  void* b32 = stage(b, true);
  void* c32 = stage(c, reads_c);
  if (!matmul(a32, DType::f32, b32, DType::f32, c32, DType::f32, g, stream)) {
    throw CudaError("gpu::Blas::gemm: cuBLASLt has no f32 algorithm for m=" + std::to_string(g.m) +
                    " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k));
  }
  if (c32 != c.ptr) launch_copy(Operand{c32, c.numel, DType::f32}, c, stream);
}

// One cublasLtMatmul, D = C in place (see the file comment for the transposition); false,
// with nothing enqueued, when cuBLASLt's heuristic offers no algorithm.
bool Blas::matmul(const void* a, DType ta, const void* b, DType tb, void* c, DType tc,
                  const core::kernel::Gemm& g, cudaStream_t stream) {
  const Plans::Key key{g.m,
                       g.n,
                       g.k,
                       g.trans_a,
                       g.trans_b,
                       static_cast<int>(ta),
                       static_cast<int>(tb),
                       static_cast<int>(tc),
                       alignment_of(a),
                       alignment_of(b),
                       alignment_of(c)};
  std::unique_ptr<Plan>& slot = plans_->plans[key];
  if (!slot) slot = make_plan(a, ta, b, tb, c, tc, g);
  const Plan& plan = *slot;
  if (!plan.found) return false;
  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  SC_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc.d, &alpha, b, plan.first.d, a, plan.second.d, &beta, c,
                                 plan.out.d, c, plan.out.d, &plan.algo, resources(stream).workspace,
                                 kWorkspaceBytes, stream));
  return true;
}

// The descriptors for D = C in place (see the file comment for the transposition), and the
// heuristic's first algorithm for these operands' alignment; found = false when it has none.
std::unique_ptr<Blas::Plan> Blas::make_plan(const void* a, DType ta, const void* b, DType tb, void* c,
                                            DType tc, const core::kernel::Gemm& g) {
  auto plan = std::make_unique<Plan>();
  // f32 operands: pedantic fp32 (no TF32, no reduced-precision internals). bf16 operands:
  // fp32 accumulation of exact bf16 products.
  const cublasComputeType_t compute = ta == DType::f32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
  SC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc.d, compute, CUDA_R_32F));
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   // our B
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // our A
  SC_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  SC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                                 sizeof(op_second)));
  // Stored shapes, column-major: B is K x N row-major (N x K col-major), or N x K with trans_b;
  // A is M x K row-major (K x M col-major), or K x M with trans_a; C is N x M col-major.
  make_layout(plan->first, tb, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k);
  make_layout(plan->second, ta, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m);
  make_layout(plan->out, tc, g.n, g.m);
  Preference pref;
  SC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.d));
  const size_t ws = kWorkspaceBytes;
  SC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                       sizeof(ws)));
  set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, b);
  set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, a);
  set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c);
  set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // NOT_SUPPORTED is the heuristic's "nothing fits" (as is found == 0); other errors throw.
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc.d, plan->first.d, plan->second.d, plan->out.d,
                                     plan->out.d, pref.d, 1, &result, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) return plan;
  cublas_check(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  plan->algo = result.algo;
  plan->found = true;
  return plan;
}

}  // namespace shardcheck::gpu
