// Partitioning a module's parameters into parameter groups (docs/semantics.md §3): by (dtype,
// requires_grad), groups in order of first appearance, parameters in registration order; a
// tied parameter registered under several names is one entry, in its first position.
//   std::vector<ParamKey> ps = {{0, DType::bf16, true}, {1, DType::f32, true}, {0, ...}};
//   partition_parameters(ps)  ->  {{0}, {1}}
#pragma once

#include <span>
#include <vector>

#include "core/base/dtype.hpp"

namespace shardcheck::core {

struct ParamKey {
  int id = 0;  // the parameter's identity: equal ids are one (tied) parameter
  DType dtype = DType::f32;
  bool requires_grad = true;
};

// Each group is a list of parameter ids.
std::vector<std::vector<int>> partition_parameters(std::span<const ParamKey> params);

}  // namespace shardcheck::core
