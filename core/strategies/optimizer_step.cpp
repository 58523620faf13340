// The shared optimizer step: the operations every engine issues for its norm, clip
// coefficient, update and cast back, in one order. Trace digests hash these operations, so
// their names, order, streams and buffers are part of the contract.
#include "core/strategies/optimizer_step.hpp"

namespace shardcheck::core {

namespace {
TensorRef f64_scalar(BufferId b) { return TensorRef{b, 0, 1, DType::f64}; }

Task<TensorRef> scalar_buffer(Runtime& rt, const DeviceScalar& s, StreamId stream) {
  if (s.kept_buffer >= 0) co_return f64_scalar(s.kept_buffer);
  co_return f64_scalar(co_await rt.alloc(8, stream, s.scratch_name));
}

Task<> free_if_scratch(Runtime& rt, const DeviceScalar& s, TensorRef held) {
  if (s.kept_buffer < 0) co_await rt.free(held.buffer);
}

Task<> update_piece(Runtime& rt, const ParamUpdate& u, const UpdatePiece& p,
                    const std::optional<TensorRef>& coef) {
  const OptimizerConfig& o = u.optimizer;
  if (o.kind == OptimizerConfig::Kind::adam) {
    kernel::Adam h{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, u.step + 1, coef.has_value()};
    co_await rt.launch(kernels::adam(u.stream, p.main, p.grad, p.adam_m, p.adam_v, coef, h, p.name));
  } else {
    kernel::Sgd h{o.lr, o.weight_decay, coef.has_value()};
    co_await rt.launch(kernels::sgd(u.stream, p.main, p.grad, coef, h, p.name));
  }
}

Task<> cast_back(Runtime& rt, const ParamUpdate& u, const UpdatePiece& p) {
  if (p.model) co_await rt.launch(kernels::copy(u.stream, p.main, *p.model, p.cast_name));
}
}  // namespace

std::string_view update_kernel(OptimizerConfig::Kind kind) {
  return kind == OptimizerConfig::Kind::adam ? "adam" : "sgd";
}

bool counts_in_norm(const ParamSpec& p, const Mutations& m) {
  return !p.shared || m.has(Mutation::tied_grad_norm_double_count);
}

Task<> grad_norm(Runtime& rt, const GradNorm& n) {
  const TensorRef sumsq = co_await scalar_buffer(rt, n.sumsq, n.stream);
  co_await rt.launch(kernels::fill(n.stream, sumsq, 0.0));
  for (const NormTerm& t : n.terms) {
    if (n.divide_first) co_await rt.launch(kernels::divide(n.stream, t.grad, t.grad, *n.divide_first));
    co_await rt.launch(kernels::sum_squares(n.stream, t.grad, sumsq, true, t.name));
  }
  if (n.reduce_group >= 0) {
    co_await rt.collective(
        {CollectiveKind::all_reduce, n.reduce_group, n.stream, sumsq, sumsq, ReduceOp::sum, 0, "grad_norm"});
  }
  const TensorRef norm = co_await scalar_buffer(rt, n.norm, n.stream);
  co_await rt.launch(kernels::clip_coef(n.stream, sumsq, f64_scalar(n.coef), norm, n.max_norm));
  if (n.norm_host) co_await rt.download(norm, n.stream, {reinterpret_cast<std::byte*>(n.norm_host), 8});
  co_await free_if_scratch(rt, n.norm, norm);
  co_await free_if_scratch(rt, n.sumsq, sumsq);
}

Task<> update_params(Runtime& rt, const ParamUpdate& u) {
  // Without clipping the kernels take no coefficient at all, rather than a coefficient of 1.
  const std::optional<TensorRef> coef =
      u.optimizer.clip_grad > 0 ? std::optional<TensorRef>(f64_scalar(u.coef)) : std::nullopt;
  for (const UpdatePiece& p : u.pieces) {
    co_await update_piece(rt, u, p, coef);
    if (u.cast == CastBack::after_each_update) co_await cast_back(rt, u, p);
  }
  if (u.cast != CastBack::after_all_updates) co_return;
  for (const UpdatePiece& p : u.pieces) co_await cast_back(rt, u, p);
}

Task<> optimizer_step(Runtime& rt, const GradNorm& n, const ParamUpdate& u) {
  co_await grad_norm(rt, n);
  co_await update_params(rt, u);
}

}  // namespace shardcheck::core
