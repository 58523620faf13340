// How a captured program's ATen operators are read by name (docs/capture-format.md): which ones
// only move bytes, which compute element i of their output from element i of their operands, and
// which add their operands up. The interpreter (definedness carried through copies and
// elementwise operators) and the value checks (what a gradient carries) read them the same way.
//   if (is_copy_op(name)) ...   // aten::copy_, clone, _to_copy, contiguous, resize_
#pragma once

#include <algorithm>
#include <iterator>
#include <string_view>

namespace shardcheck::core {

// Operators that move bytes without using them: their output holds their input.
inline bool is_copy_op(std::string_view name) {
  return name == "aten::copy_" || name == "aten::clone" || name == "aten::_to_copy" ||
         name == "aten::contiguous" || name == "aten::resize_";
}

// ATen operators whose element i depends on element i of their tensor operands alone (with
// scalars beside them), in place or not. Only with every operand of one size do the byte ranges
// line up element for element; a broadcast operand has another size.
inline bool is_elementwise_op(std::string_view name) {
  static constexpr std::string_view kOps[] = {
      "aten::add",           "aten::add_",
      "aten::sub",           "aten::sub_",
      "aten::mul",           "aten::mul_",
      "aten::div",           "aten::div_",
      "aten::neg",           "aten::neg_",
      "aten::abs",           "aten::sqrt",
      "aten::addcmul_",      "aten::addcdiv_",
      "aten::lerp_",         "aten::maximum",
      "aten::minimum",       "aten::clamp",
      "aten::clamp_",        "aten::relu",
      "aten::relu_",         "aten::gelu",
      "aten::sigmoid",       "aten::tanh",
      "aten::exp",           "aten::threshold_backward",
      "aten::gelu_backward",
  };
  return std::find(std::begin(kOps), std::end(kOps), name) != std::end(kOps);
}

// Elementwise operators whose output is the sum of their tensor operands (each times the
// operator's `scale` where the capture recorded one: add's alpha).
inline bool is_additive_op(std::string_view name) {
  return name == "aten::add" || name == "aten::add_" || name == "aten::_foreach_add_" ||
         name == "aten::_foreach_add";
}

// Elementwise operators that multiply their one tensor operand by a number (the record's
// `scale`, where the capture knew the number).
inline bool is_scaling_op(std::string_view name) {
  return name == "aten::mul" || name == "aten::mul_" || name == "aten::div" || name == "aten::div_" ||
         name == "aten::_foreach_mul_" || name == "aten::_foreach_div_" || name == "aten::_foreach_mul" ||
         name == "aten::_foreach_div";
}

// Operators that apply one operator to each tensor of a list: their i-th output is made from the
// i-th tensor of each list operand.
inline bool is_foreach_op(std::string_view name) { return name.starts_with("aten::_foreach_"); }

// Operators that fill their output with a constant that is the same on every rank.
inline bool is_constant_fill_op(std::string_view name) {
  return name == "aten::zeros" || name == "aten::ones" || name == "aten::zeros_like" ||
         name == "aten::ones_like" || name == "aten::zero_" || name == "aten::new_zeros" ||
         name == "aten::new_ones";
}

}  // namespace shardcheck::core
