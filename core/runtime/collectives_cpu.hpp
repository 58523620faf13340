// Collectives computed on the CPU from every member's bytes, in group-rank order, so the
// result is bitwise reproducible. Used by the in-order runtime and the simulator, and as the
// reference for the GPU's device-local communicator.
//   std::byte* in[2] = {...}; std::byte* out[2] = {...};
//   execute_collective_cpu(call, in, out);   // call.kind, reduce, root, sizes as in NCCL
#pragma once

#include <cstddef>
#include <span>

#include "core/runtime/runtime.hpp"

namespace shardcheck::core {

// Reductions accumulate in float for f32/bf16 (double for f64), adding members in group-rank
// order, round once at the end, and take the average as sum / members (a true division, so
// exact mode stays exact for any member count).
void execute_collective_cpu(const CollectiveCall& call, std::span<std::byte* const> inputs,
                            std::span<std::byte* const> outputs);

}  // namespace shardcheck::core
