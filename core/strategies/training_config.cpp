// The exact-mode grid.
#include "core/strategies/training_config.hpp"

#include <cmath>

namespace shardcheck::core {

ExactGrid exact_grid(int dp, int microbatches, int64_t logical_elements) {
  // n contributions to one element are summed: dp*mb of them, twice for a tied parameter.
  const double n = 2.0 * dp * microbatches;
  // fp32: (n * limit) * n < 2^24 keeps every partial sum of grid values an integer below
  // 2^24 in units of 2^-k. fp64 norms: elements * (n * limit)^2 < 2^52.
  const double fp32_bound = std::ldexp(1.0, 23) / (n * n);
  const double fp64_bound = std::ldexp(1.0, 26) / (n * std::sqrt(static_cast<double>(logical_elements)));
  const double bound = std::min(fp32_bound, fp64_bound);
  ExactGrid g;
  g.limit = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(std::max(bound, 1.0)))));
  // Contributions larger than 1/16 are clamped; choose the finest q with q * limit >= 1/16.
  const double target = 0.0625 / g.limit;
  g.k = 0;
  while (dp * microbatches * std::ldexp(1.0, -(g.k + 1)) >= target) ++g.k;
  g.q = dp * microbatches * std::ldexp(1.0, -g.k);
  return g;
}

}  // namespace shardcheck::core
