// How a reduction combines its members: the element-wise sum, the mean (sum / members), the
// product, the minimum or the maximum.
// Shared by the runtime's collectives and by Partial placements, so it lives below both.
#pragma once

#include <cstdint>
#include <string_view>

namespace shardcheck::core {

// product, min and max come from captured programs (docs/capture-format.md).
enum class ReduceOp : uint8_t { sum, avg, product, min, max };
constexpr std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::product:
      return "product";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

}  // namespace shardcheck::core
