// GELU in the tanh form, forward and backward, the CPU twin of gpu/gelu.cu. Elementwise, no
// sums: each element's fp32 operations run in the order written, and the GPU kernels follow
// them one for one, and tanh is core/kernels/tanh_f32.hpp on both, so they agree bit for bit.
#include <string>

#include "core/kernels/cpu/arg_check.hpp"
#include "core/kernels/cpu/cpu_kernels.hpp"
#include "core/kernels/cpu/operands.hpp"
#include "core/kernels/cpu/simd.hpp"
#include "core/kernels/tanh_f32.hpp"

namespace shardcheck::core::cpu {

namespace {

// sqrt(2/pi) and 3 * 0.044715 as the nearest floats.
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kGeluCubic3 = 0.134145f;

// The shared front half of forward and backward: t = tanh(s * (x + c * ((x * x) * x))).
[[gnu::always_inline]] inline float gelu_tanh(float x) {
  const float cube = (x * x) * x;
  return tanh_f32(kGeluScale * (x + kGeluCubic * cube));
}

// y = (0.5f * x) * (1 + t), in place.
[[gnu::always_inline]] inline void forward_loop_body(float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) v[i] = (0.5f * v[i]) * (1.0f + gelu_tanh(v[i]));
}
SHARDCHECK_SIMD_LEVELS(forward_loop, (float* v, size_t n), (v, n))

// dx = dy * local(x), into dy.
[[gnu::always_inline]] inline void backward_loop_body(const float* x, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float xi = x[i], t = gelu_tanh(xi);
    const float sech2 = 1.0f - t * t;
    const float local =
        0.5f * (1.0f + t) + (((0.5f * xi) * sech2) * kGeluScale) * (1.0f + kGeluCubic3 * (xi * xi));
    dx[i] = dx[i] * local;
  }
}
SHARDCHECK_SIMD_LEVELS(backward_loop, (const float* x, float* dx, size_t n), (x, dx, n))

}  // namespace

std::string check(const KernelCall& c, const kernel::GeluForward&) {
  ArgCheck a(c);
  a.counts(1, 1).write(0, "y", Kind::floating, len(c.writes, 0), "any");
  return a.read(0, "x", Kind::floating, len(c.writes, 0), "y's length").message();
}

// y = (0.5f * x) * (1 + t), t = tanh(sqrt(2/pi) * (x + 0.044715f * ((x * x) * x))).
void execute(const KernelCall& c, const kernel::GeluForward&, MemoryView& mem) {
  if (float* y = f32_output_from(mem, c.reads[0], c.writes[0])) {
    forward_loop(y, static_cast<size_t>(c.writes[0].numel));
    return;
  }
  Floats v = load_floats(mem, c.reads[0]);
  forward_loop(v.data(), v.size());
  store_floats(mem, c.writes[0], v);
}

std::string check(const KernelCall& c, const kernel::GeluBackward&) {
  ArgCheck a(c);
  a.counts(2, 1).write(0, "dx", Kind::floating, len(c.writes, 0), "any");
  a.read(0, "x", Kind::floating, len(c.writes, 0), "dx's length");
  return a.read(1, "dy", Kind::floating, len(c.writes, 0), "dx's length").message();
}

// dx = dy * (0.5f * (1 + t) + (((0.5f * x) * (1 - t * t)) * s) * (1 + 3c * (x * x))), the
// derivative of the forward's product, with sech^2 written as 1 - tanh^2 (one tanh).
void execute(const KernelCall& c, const kernel::GeluBackward&, MemoryView& mem) {
  // In place: dy becomes dx where x shares no byte with it.
  if (const float* xp = f32_in_place(mem, c.reads[0])) {
    if (float* dxp = f32_output_from(mem, c.reads[1], c.writes[0], {c.reads[0]})) {
      backward_loop(xp, dxp, static_cast<size_t>(c.writes[0].numel));
      return;
    }
  }
  const Floats x = load_floats(mem, c.reads[0]);
  Floats dx = load_floats(mem, c.reads[1]);
  backward_loop(x.data(), dx.data(), x.size());
  store_floats(mem, c.writes[0], dx);
}

}  // namespace shardcheck::core::cpu
