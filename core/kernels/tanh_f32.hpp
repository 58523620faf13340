// tanh in fp32, written out in plain IEEE operations so that it is the same function on every
// machine and on both backends: GELU's CPU kernels (core/kernels/cpu/gelu.cpp) and its CUDA
// kernels (gpu/gelu.cu) call this one definition, and their results agree bit for bit. libm's
// tanhf and CUDA's differ from each other, and libm's may differ between library versions.
//
// The evaluation, with a = |x|:
//   a < 1:     a + a^3 P(a^2), P of degree 7 fitted (weighted least squares, iterated towards
//              minimax) to (tanh(a) - a) / a^3; its relative error is 4e-10, far under fp32's.
//   otherwise: 1 - 2 / (e^(2a) + 1), where 2 / (e^(2a) + 1) < 0.25, so its rounding weighs
//              a half ulp of tanh at most; a is clamped to 9.5 (tanh rounds to 1 from 9.02 on) and
//              e^y = 2^n p(r), n = round(y / ln 2), r = y - n ln 2 in two parts (Cody-Waite),
//              p the Taylor polynomial of degree 7 (truncation under 6e-9 for |r| <= ln2 / 2).
//   the sign of x is copied back; NaN stays NaN.
// Measured against tanhl on every 101st fp32 bit pattern of [0, 9.5] (2026-12-02, x86-64):
// at most 1.07 ulp from the exact tanh, at 0.991 (glibc's tanhf there: 2.13 ulp; CUDA
// documents 2 ulp for its own). tanh_f32_test holds every 61st pattern under 1.5 ulp; its
// hidden case '[.tanh_exhaustive]' sweeps them all.
//
// Every operation is one rounding (the build forbids FMA contraction, -ffp-contract=off on the
// host and -fmad=false for CUDA) and the branches are selects, so a loop over this function
// vectorizes and each lane computes what the scalar code computes.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SC_TANH_HD __host__ __device__ __forceinline__
#else
#define SC_TANH_HD inline
#endif

namespace shardcheck::core {

namespace tanh_detail {

SC_TANH_HD uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SC_TANH_HD float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Coefficients of P, lowest first.
inline constexpr float kP0 = -0.333333283662796f;
inline constexpr float kP1 = 0.1333319991827011f;
inline constexpr float kP2 = -0.05395309999585152f;
inline constexpr float kP3 = 0.02178473211824894f;
inline constexpr float kP4 = -0.008595115505158901f;
inline constexpr float kP5 = 0.003078595269471407f;
inline constexpr float kP6 = -0.0008411378366872668f;
inline constexpr float kP7 = 0.00012147086818004027f;

inline constexpr float kSmall = 1.0f;  // below it, the polynomial
inline constexpr float kClamp = 9.5f;  // above it, tanh is 1 in fp32

inline constexpr float kLog2e = 1.44269502f;
inline constexpr float kLn2Hi = 0.693359375f;  // 9 significant bits: n * kLn2Hi is exact
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer

}  // namespace tanh_detail

SC_TANH_HD float tanh_f32(float x) {
  using namespace tanh_detail;
  const uint32_t sign = bits_of(x) & 0x80000000u;
  const float a = float_of(bits_of(x) & 0x7fffffffu);

  // Small: a + a^3 P(a^2).
  const float s = a * a;
  const float p = ((((((kP7 * s + kP6) * s + kP5) * s + kP4) * s + kP3) * s + kP2) * s + kP1) * s + kP0;
  const float small = a + (a * s) * p;

  // Large: 1 - 2 / (e^(2a) + 1).
  const float y = 2.0f * (a < kClamp ? a : kClamp);  // NaN takes the clamp; restored below
  const float shifted = y * kLog2e + kRound;
  const float n = shifted - kRound;
  const int32_t ni = static_cast<int32_t>(bits_of(shifted) - bits_of(kRound));
  const float r = (y - n * kLn2Hi) - n * kLn2Lo;
  const float er =
      ((((((r * (1.0f / 5040) + (1.0f / 720)) * r + (1.0f / 120)) * r + (1.0f / 24)) * r + (1.0f / 6)) * r +
        0.5f) *
           r +
       1.0f) *
          r +
      1.0f;
  const float e = er * float_of(static_cast<uint32_t>(ni + 127) << 23);  // ni in [3, 27]
  const float large = 1.0f - 2.0f / (e + 1.0f);

  const float t = a < kSmall ? small : large;
  const float signed_t = float_of(bits_of(t) | sign);
  return a != a ? x : signed_t;
}

}  // namespace shardcheck::core

#undef SC_TANH_HD
