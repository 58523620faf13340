// The redistribute planner and its executor.
#include "core/layout/redistribute.hpp"

namespace shardcheck::core {

std::string to_string(RedistributePlan::Op op) {
  switch (op) {
    case RedistributePlan::Op::all_gather:
      return "all_gather";
    case RedistributePlan::Op::all_reduce:
      return "all_reduce";
    case RedistributePlan::Op::reduce_scatter:
      return "reduce_scatter";
    case RedistributePlan::Op::local_slice:
      return "local_slice";
    case RedistributePlan::Op::relabel:
      return "relabel";
  }
  return "?";
}

Expected<RedistributePlan> plan_redistribute(std::span<const Placement> from, std::span<const Placement> to) {
  if (from.size() != to.size()) {
    return fail("cannot redistribute ", to_string(from), " to ", to_string(to),
                ": they have different axis counts");
  }
  if (Status s = validate_placements(from); !s) return s.error();
  if (Status s = validate_placements(to); !s) return s.error();
  int changed = -1;
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] == to[i]) continue;
    if (changed >= 0) {
      return fail("cannot redistribute ", to_string(from), " to ", to_string(to), ": axes ", changed, " and ",
                  i, " both change; redistribute changes one axis per call");
    }
    changed = static_cast<int>(i);
  }
  if (changed < 0) return fail("nothing to redistribute: placements are already ", to_string(to));
  const Placement a = from[changed], b = to[changed];
  using Op = RedistributePlan::Op;
  if (a.is_flat() && b.is_replicate()) return RedistributePlan{Op::all_gather, changed};
  if (a.is_partial() && b.is_replicate()) return RedistributePlan{Op::all_reduce, changed, a.reduce_op()};
  if (a.is_partial() && b.is_flat()) return RedistributePlan{Op::reduce_scatter, changed, a.reduce_op()};
  if (a.is_replicate() && b.is_flat()) return RedistributePlan{Op::local_slice, changed};
  if (a.is_replicate() && b == Placement::partial(ReduceOp::avg))
    return RedistributePlan{Op::relabel, changed};
  std::string why = "unsupported transition";
  if (a.is_flat() && b.is_partial())
    why = "a Flat shard holds no full-size contribution to relabel as Partial";
  if (a.is_replicate() && b.is_partial())
    why =
        "Replicate relabels only as Partial(avg); as Partial(sum) the value would be multiplied by the axis "
        "size";
  if (a.is_partial() && b.is_partial())
    why = "Partial(sum) and Partial(avg) differ by the axis size; reduce first";
  return fail("cannot redistribute axis ", changed, " from ", a.to_string(), " to ", b.to_string(), ": ",
              why);
}

Task<DBuffer> redistribute(Runtime& rt, const DBuffer& in, Placements to, RedistributeOptions opt) {
  auto plan = plan_redistribute(in.placements, to);
  if (!plan) throw InternalError(plan.error().message());
  DBuffer out = in;
  out.placements = std::move(to);
  const LocalRange from_range = in.local(), to_range = out.local();
  using Op = RedistributePlan::Op;
  const bool reuse = opt.in_place && (plan->op == Op::all_reduce || plan->op == Op::relabel);
  if (plan->op == Op::relabel) {
    if (!reuse) throw InternalError("relabel is always in place; pass in_place");
    co_return out;
  }
  if (!reuse) {
    out.storage = co_await rt.alloc(to_range.numel * dtype_bytes(in.dtype), opt.stream, opt.tag);
    out.stream = opt.stream;
  }
  if (plan->op == Op::local_slice) {
    const TensorRef src = in.local_ref().slice(to_range.offset - from_range.offset, to_range.numel);
    co_await rt.launch(kernels::copy(opt.stream, src, out.local_ref(), "slice:" + opt.tag));
    co_return out;
  }
  CollectiveCall c;
  c.group = in.mesh.groups.at(plan->axis);
  c.stream = opt.stream;
  c.input = in.local_ref();
  c.output = out.local_ref();
  c.reduce = plan->reduce;
  c.tag = opt.tag;
  c.kind = plan->op == Op::all_gather       ? CollectiveKind::all_gather
           : plan->op == Op::reduce_scatter ? CollectiveKind::reduce_scatter
                                            : CollectiveKind::all_reduce;
  co_await rt.collective(std::move(c));
  co_return out;
}

}  // namespace shardcheck::core
