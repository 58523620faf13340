// Pipeline schedules: the order in which one pipeline rank runs forward and backward passes
// of (model chunk, microbatch). 1F1B for one chunk per rank, Megatron's interleaved 1F1B for
// several (virtual pipelining). Every rank derives its order from the same function, which
// is what makes the point-to-point transfers between stages pair up.
//   for (auto a : pipeline_schedule(/*pp*/ 2, /*vpp*/ 2, /*rank*/ 0, /*mb*/ 4)) ...
#pragma once

#include <string>
#include <vector>

namespace shardcheck::core {

struct PipelineAction {
  enum class Kind : uint8_t { forward, backward };
  Kind kind = Kind::forward;
  int chunk = 0;
  int microbatch = 0;
  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};

// Requires microbatches % pp == 0 when vpp > 1 (as Megatron's interleaved schedule does).
std::vector<PipelineAction> pipeline_schedule(int pp, int vpp, int pp_rank, int microbatches);
std::string to_string(const std::vector<PipelineAction>& actions);  // "F0.0 F0.1 B0.0 ..."

}  // namespace shardcheck::core
