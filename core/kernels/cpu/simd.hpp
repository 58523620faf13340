// The CPU kernels' hot loops, compiled once per vector width and picked once per process by
// what the processor has: baseline x86-64 (SSE2, four fp32 lanes), AVX2 (eight) and AVX-512F
// (sixteen). Every version computes the same IEEE operations in the same order on each element:
// the build forbids FMA contraction (-ffp-contract=off) and nothing here calls std::fma, so
// only the lane count differs and the results agree bit for bit (kernels_cpu_test runs every
// kernel at every level the machine has and compares the bits).
//   [[gnu::always_inline]] inline void scale_body(float* x, size_t n) { ... }
//   SHARDCHECK_SIMD_LEVELS(scale, (float* x, size_t n), (x, n))   // defines scale(x, n)
#pragma once

#include <cstdint>
#include <vector>

namespace shardcheck::core::cpu {

enum class SimdLevel : uint8_t { baseline, avx2, avx512 };
const char* to_string(SimdLevel l);

// The level the loops run at: the widest the processor has, unless a test forced one.
SimdLevel simd_level();
// The levels this processor can run, narrowest first (baseline always).
std::vector<SimdLevel> simd_levels();
// For tests: runs every loop at `l` from now on (it must be one of simd_levels()); nullptr
// semantics are kept simple: call it again with the widest level to restore.
void force_simd_level(SimdLevel l);

}  // namespace shardcheck::core::cpu

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#define SHARDCHECK_SIMD_TARGET_AVX2 __attribute__((target("avx2")))
#define SHARDCHECK_SIMD_TARGET_AVX512 __attribute__((target("avx512f")))
#define SHARDCHECK_SIMD_X86 1
#else
#define SHARDCHECK_SIMD_TARGET_AVX2
#define SHARDCHECK_SIMD_TARGET_AVX512
#define SHARDCHECK_SIMD_X86 0
#endif

// Defines `void NAME PARAMS`, which runs NAME##_body ARGS (an always-inline function) compiled
// for the current simd_level().
#define SHARDCHECK_SIMD_LEVELS(NAME, PARAMS, ARGS)                              \
  void NAME##_baseline PARAMS { NAME##_body ARGS; }                             \
  SHARDCHECK_SIMD_TARGET_AVX2 void NAME##_avx2 PARAMS { NAME##_body ARGS; }     \
  SHARDCHECK_SIMD_TARGET_AVX512 void NAME##_avx512 PARAMS { NAME##_body ARGS; } \
  void NAME PARAMS {                                                            \
    switch (::shardcheck::core::cpu::simd_level()) {                            \
      case ::shardcheck::core::cpu::SimdLevel::avx512:                          \
        return NAME##_avx512 ARGS;                                              \
      case ::shardcheck::core::cpu::SimdLevel::avx2:                            \
        return NAME##_avx2 ARGS;                                                \
      case ::shardcheck::core::cpu::SimdLevel::baseline:                        \
        break;                                                                  \
    }                                                                           \
    return NAME##_baseline ARGS;                                                \
  }
