// FsdpEngine: set-up, unshard/reshard, and the accumulation state machine.
#include "core/strategies/fsdp_engine.hpp"

#include <cstring>

#include "core/layout/redistribute.hpp"
#include "core/strategies/param_groups.hpp"

namespace shardcheck::core {

namespace {
const Placement kR = Placement::replicate(), kPavg = Placement::partial(ReduceOp::avg);

bool all_replicate(const Placements& p) {
  for (const auto& x : p) {
    if (!x.is_replicate()) return false;
  }
  return true;
}

// Reset without communication is possible when every axis either already matches or goes
// from Replicate to Partial(avg) (a replicated value is its own average).
bool relabelable(const Placements& from, const Placements& to) {
  for (size_t i = 0; i < from.size(); ++i) {
    if (!(from[i] == to[i] || (from[i].is_replicate() && to[i] == kPavg))) return false;
  }
  return true;
}

std::span<const std::byte> as_bytes(const std::vector<float>& v, int64_t first, int64_t count) {
  return {reinterpret_cast<const std::byte*>(v.data() + first), static_cast<size_t>(count) * 4};
}
}  // namespace

FsdpEngine::FsdpEngine(EngineEnv env) : env_(std::move(env)), pl_(placements_for(env_.config->strategy)) {
  const ModelLayout& m = *env_.model;
  auto names = std::make_shared<std::vector<std::string>>();
  for (int i = 0; i < m.num_logical(); ++i) names->push_back(m.logical_name(i));
  names_ = std::move(names);
  const bool separate = mutated(Mutation::vpp_separate_contexts) && m.vpp() > 1;
  const int contexts = separate ? m.vpp() : 1;
  for (int c = 0; c < contexts; ++c) {
    const std::string suffix = separate ? ".c" + std::to_string(c) : "";
    Ctx ctx;
    if (env_.config->unified_comm) {
      ctx.ag = ctx.rs = rt().stream("comm" + suffix);
    } else {
      ctx.ag = rt().stream("ag" + suffix);
      ctx.rs = rt().stream("rs" + suffix);
    }
    ctx_.push_back(ctx);
  }
  for (int u : env_.units) {
    // TinyLM's parameters share dtype and requires_grad, so each unit forms one group.
    std::vector<ParamKey> keys;
    for (int p : m.units()[u].params) keys.push_back({p, env_.config->precision.param, true});
    const auto parts = partition_parameters(keys);
    if (parts.size() != 1)
      throw InternalError("unit " + m.units()[u].name + " would need several parameter groups");
    Group g;
    g.unit = u;
    g.ctx = separate ? env_.chunk_of(u) : 0;
    g.name = m.units()[u].name;
    g.params = parts.front();
    std::vector<Shape> shapes;
    for (int p : g.params) shapes.push_back(m.params()[p].shape);
    g.layout = std::make_shared<const GlobalLayout>(GlobalLayout::create(shapes, env_.dp_size()).value());
    group_index_[u] = static_cast<int>(groups_.size());
    groups_.push_back(std::move(g));
  }
}

std::pair<FsdpEngine::Group*, int> FsdpEngine::slot(int param) {
  const int unit = env_.model->params()[param].unit;
  Group& g = group_of_unit(unit);
  for (size_t t = 0; t < g.params.size(); ++t) {
    if (g.params[t] == param) return {&g, static_cast<int>(t)};
  }
  throw InternalError("parameter not in its unit's group");
}

DBuffer FsdpEngine::shaped(const Group& g, Placements p, DType t) const {
  DBuffer d;
  d.mesh = BufferMesh{env_.mesh, env_.dp_axes(), dp_groups_, env_.rank};
  d.placements = std::move(p);
  d.layout = g.layout;
  d.dtype = t;
  return d;
}

std::shared_ptr<const LogicalMap> FsdpEngine::map_for(const Group& g, const DBuffer& d) const {
  auto map = std::make_shared<LogicalMap>();
  map->param_names = names_;
  for (const OwnedRows& o : owned_rows(*g.layout, d.local())) {
    const int64_t row = g.layout->tensor(o.tensor).row;
    map->segments.push_back(
        {o.local_offset, o.rows * row, env_.model->params()[g.params[o.tensor]].logical, o.first_row * row});
  }
  return map;
}

Task<DBuffer> FsdpEngine::allocate(Group& g, Placements p, DType t, StreamId s, const std::string& what) {
  DBuffer d = shaped(g, std::move(p), t);
  d.storage = co_await rt().alloc(d.local_bytes(), s, g.name + "." + what);
  d.stream = s;
  rt().annotate(d.storage, map_for(g, d));
  co_return d;
}

Task<DBuffer> FsdpEngine::convert(Group& g, DBuffer src, const Placements& to, StreamId s,
                                  const std::string& tag, bool free_src) {
  DBuffer cur = src;
  for (size_t i = 0; i < to.size(); ++i) {
    if (cur.placements[i] == to[i]) continue;
    Placements next = cur.placements;
    next[i] = to[i];
    const auto plan = plan_redistribute(cur.placements, next).value();
    const bool in_place =
        plan.op == RedistributePlan::Op::all_reduce || plan.op == RedistributePlan::Op::relabel;
    DBuffer nxt =
        co_await redistribute(rt(), cur, next, RedistributeOptions{s, g.name + ":" + tag, in_place});
    if (nxt.storage != cur.storage) {
      rt().annotate(nxt.storage, map_for(g, nxt));
      if (cur.storage != src.storage || free_src) co_await rt().free(cur.storage);
    }
    cur = nxt;
  }
  co_return cur;
}

Task<> FsdpEngine::setup() {
  const Mesh& mesh = *env_.mesh;
  const std::vector<int> axes = env_.dp_axes();
  for (int a : axes) dp_groups_.push_back(rt().group(mesh.name(a), mesh.group(env_.rank, a)));
  dp_all_ = rt().group("dp_all", mesh.group(env_.rank, axes));
  std::vector<int> all(mesh.world_size());
  for (int r = 0; r < mesh.world_size(); ++r) all[r] = r;
  world_ = rt().group("world", all);
  const int pp = env_.pp(), pr = env_.pp_rank();
  if (pp > 1 && env_.model->config().tied && (pr == 0 || pr == pp - 1)) {
    std::vector<int> c = mesh.coords(env_.rank);
    const int pa = mesh.axis("pp");
    c[pa] = 0;
    const int first = mesh.rank_of(c);
    c[pa] = pp - 1;
    const std::vector<int> members{first, mesh.rank_of(c)};
    embedding_ = rt().group("embedding", members);
  }
  const StreamId compute = env_.streams.compute;
  coef_ = co_await rt().alloc(8, compute, "clip.coef");
  norm_ = co_await rt().alloc(8, compute, "grad.norm");
  co_await rt().launch(kernels::fill(compute, TensorRef{coef_, 0, 1, DType::f64}, 1.0));
  co_await rt().launch(kernels::fill(compute, TensorRef{norm_, 0, 1, DType::f64}, 0.0));
  for (Group& g : groups_) co_await initialize(g);
  // Initialization ran on compute; the comm streams' first reads of those buffers follow it.
  for (const Ctx& c : ctx_) {
    co_await rt().wait_stream(c.ag, compute);
    if (c.rs != c.ag) co_await rt().wait_stream(c.rs, compute);
  }
}

Task<> FsdpEngine::initialize(Group& g) {
  const ModelLayout& m = *env_.model;
  const StreamId compute = env_.streams.compute;
  const DType pd = env_.config->precision.param;
  g.main = co_await allocate(g, pl_.main, DType::f32, compute, "main_weight");
  if (mutated(Mutation::no_initial_broadcast)) {
    // Each rank draws its own initial values and nothing makes them agree.
    const uint64_t seed = mix64(m.config().init_seed + 1 + static_cast<uint64_t>(env_.dp_rank()));
    for (const OwnedRows& o : g.main.owned()) {
      const std::vector<float> v = m.initial_value(m.params()[g.params[o.tensor]].logical, seed);
      const int64_t row = g.layout->tensor(o.tensor).row;
      co_await rt().upload(TensorRef::f32(g.main.storage, o.local_offset, o.rows * row), compute,
                           as_bytes(v, o.first_row * row, o.rows * row));
    }
  } else {
    DBuffer full = co_await allocate(g, Placements(pl_.main.size(), kR), DType::f32, compute, "init");
    for (int t = 0; t < g.layout->num_tensors(); ++t) {
      const std::vector<float> v = m.initial_value(m.params()[g.params[t]].logical);
      const TensorSlot& slot = g.layout->tensor(t);
      co_await rt().upload(TensorRef::f32(full.storage, slot.offset, slot.numel), compute,
                           as_bytes(v, 0, slot.numel));
    }
    if (env_.dp_size() > 1) {
      co_await rt().collective({CollectiveKind::broadcast, dp_all_, compute, full.local_ref(),
                                full.local_ref(), ReduceOp::sum, 0, g.name + ":init"});
    }
    const LocalRange mine = g.main.local();
    co_await rt().launch(kernels::copy(compute, full.local_ref().slice(mine.offset, mine.numel),
                                       g.main.local_ref(), "init.slice"));
    co_await rt().free(full.storage);
  }
  // Main weights start as fp32 copies of the model's weights: with a bf16 model, the
  // bf16-rounded initial values (as Megatron builds its main parameters from the model's).
  if (pd == DType::bf16)
    co_await rt().launch(
        kernels::round_bf16(compute, g.main.local_ref(), g.main.local_ref(), g.name + ".init_round"));
  if (pd == DType::f32) {
    g.model = g.main;  // model_weight aliases main_weight
  } else {
    g.model_shard = co_await allocate(g, pl_.main, pd, compute, "model_weight");
    co_await rt().launch(kernels::copy(compute, g.main.local_ref(), g.model_shard->local_ref(), "cast"));
    g.model = *g.model_shard;
  }
  g.adam_m = co_await allocate(g, pl_.main, DType::f32, compute, "adam_m");
  g.adam_v = co_await allocate(g, pl_.main, DType::f32, compute, "adam_v");
  co_await rt().launch(kernels::fill(compute, g.adam_m.local_ref(), 0.0));
  co_await rt().launch(kernels::fill(compute, g.adam_v.local_ref(), 0.0));
}

Task<> FsdpEngine::begin_step(int) {
  for (Group& g : groups_) {
    if (!g.drop_grad) continue;
    co_await rt().free(g.grad.storage);
    g.has_grad = g.drop_grad = false;
  }
}

Task<> FsdpEngine::gather(Group& g) {
  Ctx& c = ctx_[g.ctx];
  // The O -> P all-gather of the new weights happens at the first unshard of a step.
  if (g.model.placements != pl_.model)
    g.model = co_await convert(g, g.model, pl_.model, c.ag, "weights", false);
  if (!all_replicate(pl_.model)) {
    g.full = co_await convert(g, g.model, Placements(pl_.model.size(), kR), c.ag, "unshard", false);
  }
  if (g.event < 0) g.event = rt().create_event(g.name + ".unsharded");
  co_await rt().record(g.event, c.ag);
}

Task<> FsdpEngine::acquire(int unit) {
  Group& g = group_of_unit(unit);
  if (g.refs++ > 0) co_return;
  if (g.prefetched) {
    g.prefetched = false;
    // The gather was issued a unit ago; compute still has to wait for it. The mutation trusts
    // that it is done by now.
    if (!mutated(Mutation::prefetch_missing_wait)) co_await rt().wait_event(env_.streams.compute, g.event);
    co_return;
  }
  co_await gather(g);
  co_await rt().wait_event(env_.streams.compute, g.event);
}

Task<> FsdpEngine::prefetch(int unit) {
  if (!env_.config->overlap) co_return;
  Group& g = group_of_unit(unit);
  if (g.refs > 0 || g.prefetched) co_return;
  // Issued before the current unit's compute: AG has waited only for compute's use of the
  // unit released before this one (release), so the gather runs beside the current compute.
  co_await gather(g);
  g.prefetched = true;
}

Task<> FsdpEngine::release(int unit) {
  Group& g = group_of_unit(unit);
  if (--g.refs > 0 || !g.full) co_return;
  // Reshard: the AG stream waits for compute's last use, then the storage is freed, so the
  // AG stream's next allocation of this block is ordered after that use.
  co_await rt().record(g.event, env_.streams.compute);
  co_await rt().wait_event(ctx_[g.ctx].ag, g.event);
  co_await rt().free(g.full->storage);
  g.full.reset();
}

TensorRef FsdpEngine::weight(int param) {
  auto [g, t] = slot(param);
  const DBuffer& src = g->full ? *g->full : g->model;
  if (!all_replicate(src.placements)) throw InternalError("weights of " + g->name + " read while sharded");
  const TensorSlot& s = g->layout->tensor(t);
  return TensorRef{src.storage, s.offset, s.numel, src.dtype};
}

Task<> FsdpEngine::begin_backward(int unit) {
  Group& g = group_of_unit(unit);
  Ctx& c = ctx_[g.ctx];
  if (env_.config->overlap) {
    // FSDP2's reduce-scatter input: on compute's pool, alive until compute has waited for the
    // reduction that reads it (retire_pending, one unit later), so no wait here.
    g.staging = co_await allocate(g, Placements(pl_.grad.size(), kPavg), env_.config->precision.grad,
                                  env_.streams.compute, "staging");
    co_return;
  }
  g.staging =
      co_await allocate(g, Placements(pl_.grad.size(), kPavg), env_.config->precision.grad, c.rs, "staging");
  // Compute writes this staging buffer; its block may be the previous one's, still being
  // read by the last reduction on rs (FSDP2 keeps that reduce-scatter state and waits).
  if (c.has_reduced) co_await rt().wait_event(env_.streams.compute, c.reduced);
}

Task<> FsdpEngine::retire_pending(Ctx& c) {
  if (!c.pending) co_return;
  co_await rt().wait_event(env_.streams.compute, c.reduced);
  co_await rt().free(c.pending->storage);
  c.pending.reset();
}

TensorRef FsdpEngine::grad(int param) {
  auto [g, t] = slot(param);
  if (!g->staging) throw InternalError("gradient of " + g->name + " requested outside its backward");
  const TensorSlot& s = g->layout->tensor(t);
  return TensorRef{g->staging->storage, s.offset, s.numel, g->staging->dtype};
}

Task<> FsdpEngine::reset_grad(Group& g, Ctx& c) {
  if (g.has_grad && g.grad.placements == pl_.grad) co_return;  // accumulating
  // The first backward after a finalization (placements say so): start a new accumulation.
  const StreamId where = mutated(Mutation::main_grad_alloc_default_stream) ? env_.streams.compute : c.rs;
  if (g.has_grad && relabelable(g.grad.placements, pl_.grad)) {
    g.grad.placements = pl_.grad;
  } else {
    if (g.has_grad) co_await rt().free(g.grad.storage);
    g.grad = co_await allocate(g, pl_.grad, env_.config->precision.grad, where, "main_grad");
    g.has_grad = true;
  }
  g.first = true;
}

Task<> FsdpEngine::accumulate(Group& g, Ctx& c) {
  const double divisor = env_.config->divisor();
  const bool on_sum = mutated(Mutation::grad_divisor_on_running_sum);
  // Reduce this backward's contribution to placement G.
  DBuffer contrib = co_await convert(g, *g.staging, pl_.grad, c.rs, "grad", false);
  if (!on_sum)
    co_await rt().launch(
        kernels::divide(c.rs, contrib.local_ref(), contrib.local_ref(), divisor, g.name + ".divide"));
  if (g.first) {
    co_await rt().launch(
        kernels::copy(c.rs, contrib.local_ref(), g.grad.local_ref(), g.name + ".accumulate"));
  } else {
    co_await rt().launch(kernels::add(c.rs, g.grad.local_ref(), contrib.local_ref(), g.grad.local_ref(),
                                      g.name + ".accumulate"));
  }
  if (on_sum)
    co_await rt().launch(
        kernels::divide(c.rs, g.grad.local_ref(), g.grad.local_ref(), divisor, g.name + ".divide"));
  g.first = false;
  if (contrib.storage != g.staging->storage) co_await rt().free(contrib.storage);
}

Task<> FsdpEngine::end_backward(int unit) {
  Group& g = group_of_unit(unit);
  Ctx& c = ctx_[g.ctx];
  const bool last = c.last;
  // With overlap, the previous unit's reduction ran during this unit's backward; compute
  // waits for it only now, after issuing that backward.
  if (env_.config->overlap) co_await retire_pending(c);
  if (c.reduced < 0) c.reduced = rt().create_event("grad.reduced");
  co_await rt().record(c.reduced, env_.streams.compute);
  co_await rt().wait_event(c.rs, c.reduced);  // RS waits for the gradients compute wrote
  co_await reset_grad(g, c);
  co_await accumulate(g, c);
  if (last) g.grad = co_await convert(g, g.grad, pl_.main, c.rs, "grad.finalize", true);
  if (env_.config->overlap) {
    c.pending = std::move(g.staging);
  } else {
    co_await rt().free(g.staging->storage);
  }
  g.staging.reset();
  co_await rt().record(c.reduced, c.rs);
  c.has_reduced = true;
}

Task<> FsdpEngine::finish_backward() {
  // At the end of backward compute waits for RS. The shared context covers every chunk; with
  // separate contexts the training loop only knows the ambient (first) one.
  const size_t n = mutated(Mutation::vpp_separate_contexts) ? 1 : ctx_.size();
  for (size_t i = 0; i < n; ++i) co_await rt().wait_stream(env_.streams.compute, ctx_[i].rs);
  for (Ctx& c : ctx_) co_await retire_pending(c);
  for (Group& g : groups_) {
    if (!g.prefetched) continue;  // gathered for an acquire that never came: drop it on AG
    g.prefetched = false;
    if (g.full) co_await rt().free(g.full->storage);
    g.full.reset();
  }
}

}  // namespace shardcheck::core
