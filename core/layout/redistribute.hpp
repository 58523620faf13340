// Redistribute: change the placement of exactly one mesh axis of a DBuffer (docs/semantics.md §2).
// The planner is pure; the executor issues the plan on a Runtime. The layout never changes.
//   plan_redistribute({Partial(avg)}, {Flat})  ->  reduce_scatter on axis 0
//   DBuffer o = co_await redistribute(rt, g, {Placement::flat()}, {.stream = rs, .tag = "grad"});
#pragma once

#include <string>

#include "core/base/status.hpp"
#include "core/base/task.hpp"
#include "core/layout/dbuffer.hpp"
#include "core/runtime/runtime.hpp"

namespace shardcheck::core {

struct RedistributePlan {
  enum class Op : uint8_t { all_gather, all_reduce, reduce_scatter, local_slice, relabel };
  Op op;
  int axis = 0;
  ReduceOp reduce = ReduceOp::sum;  // for all_reduce and reduce_scatter
  bool communicates() const { return op != Op::local_slice && op != Op::relabel; }
};
std::string to_string(RedistributePlan::Op op);

// Flat->Replicate all-gather, Partial->Replicate all-reduce, Partial->Flat reduce-scatter,
// Replicate->Flat local slice, Replicate->Partial(avg) relabel; anything else is an error
// that says why.
Expected<RedistributePlan> plan_redistribute(std::span<const Placement> from, std::span<const Placement> to);

struct RedistributeOptions {
  StreamId stream = -1;  // where the collective or copy runs and the output is allocated
  std::string tag;       // logical name of the collective
  // all_reduce and relabel may work in place on the input's storage.
  bool in_place = false;
};

// Issues the plan. The result is a new DBuffer (new storage unless in place); the input is
// left for the caller to free, so the caller decides the lifetime (and its stream).
Task<DBuffer> redistribute(Runtime& rt, const DBuffer& in, Placements to, RedistributeOptions options);

}  // namespace shardcheck::core
