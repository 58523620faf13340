// Which vector width the CPU kernels' loops run at (simd.hpp).
#include "core/kernels/cpu/simd.hpp"

#include <atomic>
#include <stdexcept>
#include <string>

namespace shardcheck::core::cpu {

namespace {

SimdLevel widest() {
#if SHARDCHECK_SIMD_X86
  // The compiler's runtime checks both the processor's features and that the system saves
  // the wider registers (XCR0).
  if (__builtin_cpu_supports("avx512f")) return SimdLevel::avx512;
  if (__builtin_cpu_supports("avx2")) return SimdLevel::avx2;
#endif
  return SimdLevel::baseline;
}

constexpr int kUnset = -1;
std::atomic<int> current{kUnset};

}  // namespace

const char* to_string(SimdLevel l) {
  switch (l) {
    case SimdLevel::baseline:
      return "baseline";
    case SimdLevel::avx2:
      return "avx2";
    case SimdLevel::avx512:
      return "avx512";
  }
  return "?";
}

SimdLevel simd_level() {
  int l = current.load(std::memory_order_relaxed);
  if (l == kUnset) {
    l = static_cast<int>(widest());
    current.store(l, std::memory_order_relaxed);
  }
  return static_cast<SimdLevel>(l);
}

std::vector<SimdLevel> simd_levels() {
  std::vector<SimdLevel> out{SimdLevel::baseline};
  const SimdLevel w = widest();
  if (w >= SimdLevel::avx2) out.push_back(SimdLevel::avx2);
  if (w >= SimdLevel::avx512) out.push_back(SimdLevel::avx512);
  return out;
}

void force_simd_level(SimdLevel l) {
  if (l > widest()) throw std::invalid_argument(std::string("this processor cannot run ") + to_string(l));
  current.store(static_cast<int>(l), std::memory_order_relaxed);
}

}  // namespace shardcheck::core::cpu
