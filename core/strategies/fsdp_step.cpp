// FsdpEngine's optimizer step: the embedding-group reduction (pipelines), what the shared
// step (optimizer_step.hpp) needs from this engine — the norm over unique logical elements
// and the main-weight shards to update — and the post-step weight sync in optimizer
// parameter order.
#include "core/base/rng.hpp"
#include "core/strategies/fsdp_engine.hpp"
#include "core/strategies/optimizer_step.hpp"

namespace shardcheck::core {

namespace {
const Placement kR = Placement::replicate();

bool all_replicate_placements(const Placements& p) {
  for (const auto& x : p) {
    if (!x.is_replicate()) return false;
  }
  return true;
}
}  // namespace

bool FsdpEngine::first_replica(const DBuffer& d) const {
  const std::vector<int> c = d.mesh.coords();
  for (size_t i = 0; i < d.placements.size(); ++i) {
    if (d.placements[i].is_replicate() && c[i] != 0) return false;
  }
  return true;
}

std::optional<TensorRef> FsdpEngine::grad_rows(const Group& g, int t) const {
  const auto rows = g.main.tensor_rows(t);
  if (!rows || !g.has_grad) return std::nullopt;
  if (g.grad.placements == g.main.placements) return g.grad.tensor_rows(t);
  // Not finalized (a bug elsewhere): read the same logical rows out of the G-shaped buffer.
  const LocalRange gr = g.grad.local(), mr = g.main.local();
  if (mr.offset < gr.offset || mr.offset + mr.numel > gr.offset + gr.numel) return std::nullopt;
  return TensorRef{g.grad.storage, mr.offset - gr.offset + rows->offset, rows->numel, g.grad.dtype};
}

Task<> FsdpEngine::embedding_allreduce() {
  if (embedding_ < 0) co_return;
  const ModelLayout& m = *env_.model;
  int param = -1;
  for (const Group& g : groups_) {
    for (int p : g.params) {
      const ParamSpec& s = m.params()[p];
      if (s.role == ParamRole::embedding || (s.role == ParamRole::output && s.shared)) param = p;
    }
  }
  auto [gp, t] = slot(param);
  Group& g = *gp;
  const StreamId compute = env_.streams.compute;
  if (mutated(Mutation::pp_embedding_allreduce_raw_shards)) {
    // Reduce each rank's own shard of the tensor as it lies in its stage's layout.
    const TensorRef rows = g.grad.tensor_rows(t).value_or(TensorRef{g.grad.storage, 0, 0, g.grad.dtype});
    co_await rt().collective(
        {CollectiveKind::all_reduce, embedding_, compute, rows, rows, ReduceOp::sum, 0, "embedding:grad"});
    co_return;
  }
  // Rebuild the full logical gradient, all-reduce it, copy this rank's rows back.
  const TensorSlot& slot_t = g.layout->tensor(t);
  const BufferId full = co_await rt().alloc(slot_t.numel * 4, compute, "embedding.full_grad");
  auto map = std::make_shared<LogicalMap>();
  map->param_names = names_;
  map->segments.push_back({0, slot_t.numel, m.params()[param].logical, 0});
  rt().annotate(full, map);
  const TensorRef full_ref = TensorRef::f32(full, 0, slot_t.numel);
  if (all_replicate_placements(g.grad.placements)) {
    co_await rt().launch(kernels::copy(compute, g.grad.local_ref().slice(slot_t.offset, slot_t.numel),
                                       full_ref, "embedding.gather"));
  } else {
    DBuffer whole = co_await convert(g, g.grad, Placements(g.grad.placements.size(), kR), compute,
                                     "embedding.gather", false);
    co_await rt().launch(kernels::copy(compute, whole.local_ref().slice(slot_t.offset, slot_t.numel),
                                       full_ref, "embedding.gather"));
    co_await rt().free(whole.storage);
  }
  co_await rt().collective({CollectiveKind::all_reduce, embedding_, compute, full_ref, full_ref,
                            ReduceOp::sum, 0, "embedding:grad"});
  for (const OwnedRows& o : g.grad.owned()) {
    if (o.tensor != t) continue;
    co_await rt().launch(kernels::copy(compute, full_ref.slice(o.first_row * slot_t.row, o.rows * slot_t.row),
                                       g.grad.local_ref().slice(o.local_offset, o.rows * slot_t.row),
                                       "embedding.scatter"));
  }
  co_await rt().free(full);
}

GradNorm FsdpEngine::norm_spec() {
  const ModelLayout& m = *env_.model;
  GradNorm n;
  n.stream = env_.streams.compute;
  n.reduce_group = world_;
  n.sumsq = DeviceScalar::scratch("grad.sumsq");
  n.coef = coef_;
  n.norm = DeviceScalar::kept(norm_);
  n.max_norm = env_.config->optimizer.clip_grad;
  plan_.counted.clear();
  for (const Group& g : groups_) {
    // Each logical element once: replicated copies count on the first replica only (exact,
    // unlike dividing by the replication factor), and the tied copy not at all.
    if (!first_replica(g.main)) continue;
    for (const OwnedRows& o : g.main.owned()) {
      const ParamSpec& p = m.params()[g.params[o.tensor]];
      if (!counts_in_norm(p, env_.config->mutations)) continue;
      const auto rows = grad_rows(g, o.tensor);
      if (!rows) continue;
      n.terms.push_back({*rows, g.name + ".sumsq"});
      const int64_t row = g.layout->tensor(o.tensor).row;
      plan_.counted.push_back({p.logical, o.first_row * row, o.rows * row});
    }
  }
  return n;
}

ParamUpdate FsdpEngine::update_spec(int step) const {
  const OptimizerConfig& o = env_.config->optimizer;
  // No cast here: post_step_sync casts each group on its AG stream, between buffer swaps.
  ParamUpdate u{env_.streams.compute, o, step, coef_, {}, CastBack::none};
  for (const Group& g : groups_) {
    for (int t = 0; t < g.layout->num_tensors(); ++t) {
      const auto w = g.main.tensor_rows(t);
      const auto gr = grad_rows(g, t);
      if (!w || !gr) continue;
      UpdatePiece piece{.main = *w,
                        .grad = *gr,
                        .name = std::string(update_kernel(o.kind)) + ":" + g.name + "." + std::to_string(t)};
      if (o.kind == OptimizerConfig::Kind::adam) {
        piece.adam_m = *g.adam_m.tensor_rows(t);
        piece.adam_v = *g.adam_v.tensor_rows(t);
      }
      u.pieces.push_back(std::move(piece));
    }
  }
  return u;
}

Task<> FsdpEngine::compute_norm() {
  const GradNorm n = norm_spec();
  co_await grad_norm(rt(), n);
}

Task<> FsdpEngine::post_step_sync() {
  const EventId stepped = rt().create_event("optimizer.done");
  co_await rt().record(stepped, env_.streams.compute);
  for (const Ctx& c : ctx_) co_await rt().wait_event(c.ag, stepped);
  // Optimizer parameter order, identical on every rank. The upstream bug iterated a set of
  // groups, whose order depends on object addresses: a different order per rank.
  std::vector<size_t> order(groups_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (mutated(Mutation::post_step_sync_set_order))
    Rng(mix64(0x5e7 + static_cast<uint64_t>(env_.rank))).shuffle(std::span<size_t>(order));
  for (size_t i : order) {
    Group& g = groups_[i];
    Ctx& c = ctx_[g.ctx];
    if (mutated(Mutation::stale_model_weight_after_step)) continue;  // compute keeps the old weights
    if (g.model_shard)
      co_await rt().launch(
          kernels::copy(c.ag, g.main.local_ref(), g.model_shard->local_ref(), g.name + ".cast"));
    const DBuffer& target = g.model_shard ? *g.model_shard : g.main;
    if (g.model.storage != target.storage) co_await rt().free(g.model.storage);
    g.model = target;
    if (mutated(Mutation::post_step_sync_set_order) && g.model.placements != pl_.model) {
      // Upstream cast and redistributed in the post-step hook, in that per-rank order.
      g.model = co_await convert(g, g.model, pl_.model, c.ag, "weights", false);
    }
  }
}

Task<> FsdpEngine::step(int step) {
  co_await embedding_allreduce();
  const GradNorm n = norm_spec();
  const ParamUpdate u = update_spec(step);
  co_await optimizer_step(rt(), n, u);
  co_await post_step_sync();
  for (Group& g : groups_) {
    // The optimizer consumed the gradient. Where G equals O, placements cannot tell the next
    // backward to start over, so the gradient is dropped (at the next step's start, so the
    // oracles still see it at this step's end).
    if (g.has_grad && pl_.grad == pl_.main) g.drop_grad = true;
  }
}

Task<> FsdpEngine::load_gradients(const std::vector<std::vector<float>>& logical) {
  const StreamId compute = env_.streams.compute;
  for (Group& g : groups_) {
    if (g.has_grad) co_await rt().free(g.grad.storage);
    g.grad = co_await allocate(g, pl_.main, DType::f32, compute, "main_grad");
    g.has_grad = true;
    co_await rt().launch(kernels::fill(compute, g.grad.local_ref(), 0.0));
    for (const OwnedRows& o : g.grad.owned()) {
      const int64_t row = g.layout->tensor(o.tensor).row;
      const std::vector<float>& v = logical.at(env_.model->params()[g.params[o.tensor]].logical);
      co_await rt().upload(g.grad.local_ref().slice(o.local_offset, o.rows * row), compute,
                           {reinterpret_cast<const std::byte*>(v.data() + o.first_row * row),
                            static_cast<size_t>(o.rows * row) * 4});
    }
  }
}

RankView FsdpEngine::view() const {
  RankView v;
  auto pieces = [&](const Group& g, const DBuffer& d, std::vector<Piece>& out) {
    for (const OwnedRows& o : owned_rows(*g.layout, d.local())) {
      const int64_t row = g.layout->tensor(o.tensor).row;
      out.push_back({env_.model->params()[g.params[o.tensor]].logical, o.first_row * row, o.rows * row,
                     d.storage, o.local_offset, d.dtype});
    }
  };
  for (const Group& g : groups_) {
    pieces(g, g.main, v.main);
    pieces(g, g.model, v.model);
    if (g.has_grad && g.grad.placements == pl_.main) pieces(g, g.grad, v.grads);
  }
  return v;
}

}  // namespace shardcheck::core
