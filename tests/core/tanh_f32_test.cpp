// core::tanh_f32 against tanhl: its error bound in ulps over fp32's range, its special values,
// and the property GELU's bitwise CPU/GPU agreement rests on: a vectorized loop computes what
// the scalar function does. The sweep in `make test` visits every 61st fp32 bit pattern of
// [0, 9.5] (18 million values, odd symmetry being exact by construction); the exhaustive
// sweep, every pattern (hidden tag, about 5 minutes):
//   build/tests/core_tests '[.tanh_exhaustive]'
#include "core/kernels/tanh_f32.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

using shardcheck::core::tanh_f32;

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// |got - exact| in units of the last place of fp32 at the exact value (subnormal spacing below
// FLT_MIN).
double ulp_error(float got, long double exact) {
  const long double mag = std::fabs(exact);
  int e = 0;
  std::frexp(static_cast<double>(mag), &e);  // mag = f * 2^e, f in [0.5, 1)
  const long double ulp =
      mag < std::numeric_limits<float>::min() ? std::ldexp(1.0L, -149) : std::ldexp(1.0L, e - 24);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - exact) / ulp);
}

struct Sweep {
  double worst = 0;
  float at = 0;
};

Sweep sweep(uint32_t stride) {
  Sweep s;
  const uint32_t last = to_bits(9.5f);
  for (uint32_t b = 0; b <= last; b += stride) {
    const float x = from_bits(b);
    const double e = ulp_error(tanh_f32(x), tanhl(static_cast<long double>(x)));
    if (e > s.worst) s = {e, x};
  }
  return s;
}

}  // namespace

TEST_CASE("tanh_f32 is within 1.5 ulp of tanh across fp32's range", "[core][kernels]") {
  const Sweep s = sweep(61);
  INFO("worst " << s.worst << " ulp at x = " << s.at);
  CHECK(s.worst < 1.5);
  // Past the clamp, every value is 1, which tanh rounds to from 9.02 on.
  for (const float x : {9.5f, 9.5000009f, 10.0f, 88.0f, 1e30f, std::numeric_limits<float>::max()}) {
    CHECK(tanh_f32(x) == 1.0f);
    CHECK(tanh_f32(-x) == -1.0f);
  }
}

TEST_CASE("tanh_f32 keeps signed zeros, infinities, NaN and odd symmetry", "[core][kernels]") {
  CHECK(to_bits(tanh_f32(0.0f)) == to_bits(0.0f));
  CHECK(to_bits(tanh_f32(-0.0f)) == to_bits(-0.0f));
  CHECK(tanh_f32(std::numeric_limits<float>::infinity()) == 1.0f);
  CHECK(tanh_f32(-std::numeric_limits<float>::infinity()) == -1.0f);
  CHECK(std::isnan(tanh_f32(std::numeric_limits<float>::quiet_NaN())));
  CHECK(tanh_f32(std::numeric_limits<float>::denorm_min()) == std::numeric_limits<float>::denorm_min());
  CHECK(tanh_f32(1e-20f) == 1e-20f);
  for (uint32_t b = 0; b < to_bits(12.0f); b += 999983) {
    const float x = from_bits(b);
    CHECK(to_bits(tanh_f32(-x)) == (to_bits(tanh_f32(x)) ^ 0x80000000u));
  }
}

TEST_CASE("tanh_f32 is monotonic at the seam between its two evaluations", "[core][kernels]") {
  // 1.0: the polynomial below, 1 - 2 / (e^2a + 1) from it on; tanh is increasing there.
  float prev = tanh_f32(from_bits(to_bits(1.0f) - 4096));
  for (uint32_t b = to_bits(1.0f) - 4095; b < to_bits(1.0f) + 4096; ++b) {
    const float t = tanh_f32(from_bits(b));
    REQUIRE(t >= prev);
    prev = t;
  }
}

TEST_CASE("tanh_f32 in a loop the compiler vectorizes equals it called one value at a time",
          "[core][kernels]") {
  std::vector<float> x(4099), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.0071f - 14.5f;
  for (size_t i = 0; i < x.size(); ++i) y[i] = tanh_f32(x[i]);
  for (size_t i = 0; i < x.size(); ++i) {
    volatile float xi = x[i];  // one call, not part of a vector loop
    REQUIRE(to_bits(y[i]) == to_bits(tanh_f32(xi)));
  }
}

TEST_CASE("tanh_f32 over every fp32 of [0, 9.5]", "[.tanh_exhaustive]") {
  const Sweep s = sweep(1);
  INFO("worst " << s.worst << " ulp at x = " << s.at);
  CHECK(s.worst < 1.5);
}
