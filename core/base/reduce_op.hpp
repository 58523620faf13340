// How a reduction combines its members: the element-wise sum, or the mean (sum / members).
// Shared by the runtime's collectives and by Partial placements, so it lives below both.
#pragma once

#include <cstdint>
#include <string_view>

namespace shardcheck::core {

enum class ReduceOp : uint8_t { sum, avg };
constexpr std::string_view to_string(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "avg"; }

}  // namespace shardcheck::core
