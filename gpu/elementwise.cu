// Elementwise kernels: one grid-stride map (device_util.cuh) with a functor per kernel type,
// computing exactly what core::execute_cpu computes, in the same compute type.
#include <type_traits>

#include "gpu/device_util.cuh"
#include "gpu/elementwise.hpp"

namespace shardcheck::gpu {

namespace {

using core::DType;

// A double parameter as the CPU sees it: cast once to the compute type C.
struct Scalar {
  float f;
  double d;
  explicit Scalar(double v) : f(static_cast<float>(v)), d(v) {}
  template <class C>
  __device__ C as() const {
    if constexpr (std::is_same_v<C, double>) {
      return d;
    } else {
      return f;
    }
  }
};

struct FillOp {
  Scalar value;
  template <class C>
  __device__ C operator()(C, C) const {
    return value.as<C>();
  }
};
struct CopyOp {
  template <class C>
  __device__ C operator()(C a, C) const {
    return a;
  }
};
struct AddOp {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return a + b;
  }
};
struct ScaleOp {
  Scalar factor;
  template <class C>
  __device__ C operator()(C a, C) const {
    return a * factor.as<C>();
  }
};
struct DivideOp {
  Scalar divisor;
  __device__ float operator()(float a, float) const { return __fdiv_rn(a, divisor.f); }
  __device__ double operator()(double a, double) const { return __ddiv_rn(a, divisor.d); }
};
struct RoundBf16Op {
  __device__ float operator()(float a, float) const { return dev::round_bf16(a); }
};
// std::clamp(v, lo, hi) is (v < lo) ? lo : (hi < v) ? hi : v, so NaN passes through; rint
// rounds half to even like std::nearbyint in the default rounding mode.
struct RoundToGridOp {
  double q, limit;
  __device__ float operator()(float x, float) const {
    double units = __ddiv_rn(static_cast<double>(x), q);
    units = units < -limit ? -limit : (limit < units ? limit : units);
    return static_cast<float>(__dmul_rn(q, rint(units)));
  }
};

// The CPU computes in double exactly when some operand is f64.
bool any_f64(std::initializer_list<Operand> ops) {
  for (const Operand& o : ops) {
    if (o.ptr != nullptr && o.dtype == DType::f64) return true;
  }
  return false;
}

template <class Op>
void launch_any(Operand a, Operand b, Operand out, Op op, cudaStream_t stream) {
  if (any_f64({a, b, out})) {
    dev::launch_map<double>(a, b, out, op, stream);
  } else {
    dev::launch_map<float>(a, b, out, op, stream);
  }
}

__global__ void bias_add_kernel(Operand x, Operand bias, Operand y, int64_t cols) {
  for (int64_t i = dev::thread_index(); i < y.numel; i += dev::grid_stride()) {
    dev::storef(y, i, dev::loadf(x, i) + dev::loadf(bias, i % cols));
  }
}

// uint32_t arithmetic wraps, as on the CPU.
__global__ void opaque_pattern_kernel(uint8_t* p, int64_t bytes, uint32_t h) {
  for (int64_t i = dev::thread_index(); i < bytes; i += dev::grid_stride()) {
    const uint32_t word = 0x3f800000u | ((h + static_cast<uint32_t>(i / 4) * 0x9e3779b9u) & 0x7fffffu);
    p[i] = static_cast<uint8_t>((word >> ((i % 4) * 8)) & 0xff);
  }
}

}  // namespace

void launch_fill(Operand out, double value, cudaStream_t stream) {
  launch_any(Operand{}, Operand{}, out, FillOp{Scalar(value)}, stream);
}
void launch_copy(Operand in, Operand out, cudaStream_t stream) {
  launch_any(in, Operand{}, out, CopyOp{}, stream);
}
void launch_add(Operand a, Operand b, Operand out, cudaStream_t stream) {
  launch_any(a, b, out, AddOp{}, stream);
}
void launch_scale(Operand in, Operand out, double factor, cudaStream_t stream) {
  launch_any(in, Operand{}, out, ScaleOp{Scalar(factor)}, stream);
}
void launch_divide(Operand in, Operand out, double divisor, cudaStream_t stream) {
  launch_any(in, Operand{}, out, DivideOp{Scalar(divisor)}, stream);
}
void launch_round_bf16(Operand in, Operand out, cudaStream_t stream) {
  dev::launch_map<float>(in, Operand{}, out, RoundBf16Op{}, stream);
}
void launch_round_to_grid(Operand in, Operand out, double q, double limit, cudaStream_t stream) {
  dev::launch_map<float>(in, Operand{}, out, RoundToGridOp{q, limit}, stream);
}

void launch_bias_add(Operand x, Operand bias, Operand y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  bias_add_kernel<<<dev::grid_for(y.numel), dev::kBlock, 0, stream>>>(x, bias, y, cols);
  SC_CUDA_CHECK_LAST();
}

void launch_opaque_pattern(void* ptr, int64_t bytes, uint32_t h, cudaStream_t stream) {
  if (bytes == 0) return;
  opaque_pattern_kernel<<<dev::grid_for(bytes), dev::kBlock, 0, stream>>>(static_cast<uint8_t*>(ptr), bytes,
                                                                          h);
  SC_CUDA_CHECK_LAST();
}

void launch_scale(const float* in, float* out, int64_t n, float factor, cudaStream_t stream) {
  launch_scale(Operand{const_cast<float*>(in), n, DType::f32}, Operand{out, n, DType::f32}, factor, stream);
}

}  // namespace shardcheck::gpu
