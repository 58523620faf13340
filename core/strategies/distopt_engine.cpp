// DistOptEngine: its layout, set-up, local accumulation, the once-per-step reduce-scatter,
// what the shared optimizer step (optimizer_step.hpp) needs from it, and the parameter
// all-gather.
#include "core/strategies/distopt_engine.hpp"

#include <algorithm>
#include <numeric>

#include "core/strategies/optimizer_step.hpp"

namespace shardcheck::core {

namespace {
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

std::span<const std::byte> as_bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size() * 4};
}
}  // namespace

int64_t DistOptLayout::bucket_elems(const TrainingConfig& c, int dp) {
  if (!c.overlap) return 0;
  if (c.bucket_size > 0) return c.bucket_size;
  return std::max<int64_t>(40'000'000, int64_t{1'000'000} * dp);
}

DistOptLayout DistOptLayout::create(const ModelLayout& model, const std::vector<int>& units, int dp,
                                    int64_t bucket_elems) {
  DistOptLayout l;
  l.offset.assign(model.params().size(), -1);
  const int64_t pad = std::lcm<int64_t>(dp, 128);
  std::vector<int> params;
  for (int u : units) {
    for (int p : model.units()[u].params) params.push_back(p);
  }
  std::sort(params.rbegin(), params.rend());  // reverse registration order
  const bool pipeline_tie = model.config().tied && model.virtual_stages() > 1;
  auto shared_embedding = [&](int p) {
    const ParamRole r = model.params()[p].role;
    return pipeline_tie && (r == ParamRole::embedding || r == ParamRole::output);
  };
  Bucket cur;
  int64_t next = 0;
  auto close = [&]() {
    if (cur.params.empty()) return;
    cur.size = round_up(next - cur.offset, pad);
    next = cur.offset + cur.size;
    l.buckets.push_back(cur);
    cur = Bucket{next, 0, {}};
  };
  for (int p : params) {
    if (shared_embedding(p)) close();  // the shared embedding sits alone in its bucket
    next = round_up(next, 64);
    l.offset[p] = next;
    next += numel(model.params()[p].shape);
    cur.params.push_back(p);
    if (shared_embedding(p) || (bucket_elems > 0 && next - cur.offset >= bucket_elems)) close();
  }
  close();
  l.total = next;
  return l;
}

DistOptEngine::DistOptEngine(EngineEnv env)
    : env_(std::move(env)),
      layout_(DistOptLayout::create(*env_.model, env_.units, env_.dp_size(),
                                    DistOptLayout::bucket_elems(*env_.config, env_.dp_size()))) {
  comm_ = env_.config->unified_comm ? rt().stream("comm") : rt().stream("rs");
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    const int64_t lo = shard_start(static_cast<int>(b)), hi = lo + shard_size(static_cast<int>(b));
    for (int p : layout_.buckets[b].params) {
      const int64_t start = layout_.offset[p], end = start + numel(env_.model->params()[p].shape);
      const int64_t s = std::max(lo, start), e = std::min(hi, end);
      if (s < e) owned_.push_back({p, static_cast<int>(b), s, s - lo, s - start, e - s});
    }
  }
}

std::shared_ptr<const LogicalMap> DistOptEngine::buffer_map() const {
  auto map = std::make_shared<LogicalMap>();
  auto names = std::make_shared<std::vector<std::string>>();
  for (int i = 0; i < env_.model->num_logical(); ++i) names->push_back(env_.model->logical_name(i));
  map->param_names = std::move(names);
  std::vector<int> order;
  for (size_t p = 0; p < layout_.offset.size(); ++p) {
    if (layout_.offset[p] >= 0) order.push_back(static_cast<int>(p));
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) { return layout_.offset[a] < layout_.offset[b]; });
  for (int p : order)
    map->segments.push_back(
        {layout_.offset[p], numel(env_.model->params()[p].shape), env_.model->params()[p].logical, 0});
  return map;
}

Task<> DistOptEngine::setup() {
  const StreamId compute = env_.streams.compute;
  make_groups();
  const DType pd = env_.config->precision.param;
  params_ = co_await rt().alloc(layout_.total * dtype_bytes(pd), compute, "distopt.params");
  grads_ = co_await rt().alloc(layout_.total * 4, compute, "distopt.grads");
  const auto map = buffer_map();  // the same positions in both buffers
  rt().annotate(params_, map);
  rt().annotate(grads_, map);
  const ModelLayout& m = *env_.model;
  const bool independent = env_.config->mutations.has(Mutation::no_initial_broadcast);
  for (size_t p = 0; p < layout_.offset.size(); ++p) {
    if (layout_.offset[p] < 0) continue;
    const int logical = m.params()[p].logical;
    const std::vector<float> v =
        independent ? m.initial_value(logical, mix64(m.config().init_seed + 1 + env_.dp_rank()))
                    : m.initial_value(logical);
    const BufferId tmp = co_await rt().alloc(static_cast<int64_t>(v.size()) * 4, compute, "distopt.init");
    co_await rt().upload(TensorRef::f32(tmp, 0, static_cast<int64_t>(v.size())), compute, as_bytes(v));
    co_await rt().launch(kernels::copy(
        compute, TensorRef::f32(tmp, 0, static_cast<int64_t>(v.size())),
        TensorRef{params_, layout_.offset[p], static_cast<int64_t>(v.size()), pd}, "distopt.init"));
    co_await rt().free(tmp);
  }
  if (env_.dp_size() > 1 && !independent) {
    for (size_t b = 0; b < layout_.buckets.size(); ++b) {
      const TensorRef bucket{params_, layout_.buckets[b].offset, layout_.buckets[b].size, pd};
      co_await rt().collective({CollectiveKind::broadcast, dp_all_, compute, bucket, bucket, ReduceOp::sum, 0,
                                "distopt:init" + std::to_string(b)});
    }
  }
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    const int64_t n = shard_size(static_cast<int>(b));
    main_.push_back(co_await rt().alloc(n * 4, compute, "distopt.main" + std::to_string(b)));
    m_.push_back(co_await rt().alloc(n * 4, compute, "distopt.adam_m" + std::to_string(b)));
    v_.push_back(co_await rt().alloc(n * 4, compute, "distopt.adam_v" + std::to_string(b)));
    co_await rt().launch(kernels::fill(compute, TensorRef::f32(m_.back(), 0, n), 0.0));
    co_await rt().launch(kernels::fill(compute, TensorRef::f32(v_.back(), 0, n), 0.0));
  }
  for (const Owned& o : owned_) {
    co_await rt().launch(kernels::copy(compute, TensorRef{params_, o.buffer_offset, o.count, pd},
                                       TensorRef::f32(main_[o.bucket], o.shard_offset, o.count),
                                       "distopt.main_init"));
  }
  coef_ = co_await rt().alloc(8, compute, "clip.coef");
  norm_ = co_await rt().alloc(8, compute, "grad.norm");
  co_await rt().launch(kernels::fill(compute, TensorRef{coef_, 0, 1, DType::f64}, 1.0));
  co_await rt().launch(kernels::fill(compute, TensorRef{norm_, 0, 1, DType::f64}, 0.0));
  params_ready_ = rt().create_event("distopt.params_ready");
  grads_ready_ = rt().create_event("distopt.grads_ready");
  if (env_.config->overlap) overlap_state();
  co_await rt().wait_stream(comm_, compute);  // the comm stream's first reads follow initialization
}

// The data-parallel and world groups, and the embedding group of the first and last pipeline
// stages when they share a tied embedding.
void DistOptEngine::make_groups() {
  const Mesh& mesh = *env_.mesh;
  dp_all_ = rt().group("dp_all", mesh.group(env_.rank, env_.dp_axes()));
  std::vector<int> all(mesh.world_size());
  std::iota(all.begin(), all.end(), 0);
  world_ = rt().group("world", all);
  const int pp = env_.pp(), pr = env_.pp_rank();
  if (pp > 1 && env_.model->config().tied && (pr == 0 || pr == pp - 1)) {
    std::vector<int> c = mesh.coords(env_.rank);
    c[mesh.axis("pp")] = 0;
    const int first = mesh.rank_of(c);
    c[mesh.axis("pp")] = pp - 1;
    embedding_ = rt().group("embedding", std::vector<int>{first, mesh.rank_of(c)});
  }
}

// Overlap: each parameter's bucket, each bucket's gathered event and its progress.
void DistOptEngine::overlap_state() {
  const size_t nb = layout_.buckets.size();
  bucket_of_.assign(layout_.offset.size(), -1);
  for (size_t b = 0; b < nb; ++b) {
    for (int p : layout_.buckets[b].params) bucket_of_[p] = static_cast<int>(b);
    gathered_.push_back(rt().create_event("distopt.gathered" + std::to_string(b)));
  }
  landed_.assign(nb, 0);
  reduced_.assign(nb, false);
  gather_pending_.assign(nb, false);
}

Task<> DistOptEngine::begin_step(int) {
  const StreamId compute = env_.streams.compute;
  if (env_.config->overlap) {
    // Compute waited for the last step's gradient reads before its optimizer. The parameter
    // all-gathers of the last step's update start now, and compute waits for each bucket at
    // its first forward use (acquire).
    co_await rt().launch(
        kernels::fill(compute, TensorRef::f32(grads_, 0, layout_.total), 0.0, "distopt.zero_grad"));
    if (params_stale_) co_await gather_params();
    params_stale_ = false;
    co_return;
  }
  // The last step's parameter all-gather and gradient reads on comm come first.
  co_await rt().wait_stream(compute, comm_);
  co_await rt().launch(
      kernels::fill(compute, TensorRef::f32(grads_, 0, layout_.total), 0.0, "distopt.zero_grad"));
}

Task<> DistOptEngine::acquire(int unit) {
  if (!env_.config->overlap) co_return;
  for (int p : env_.model->units()[unit].params) {
    const int b = bucket_of_.at(p);
    if (b < 0 || !gather_pending_[b]) continue;
    gather_pending_[b] = false;
    co_await rt().wait_event(env_.streams.compute, gathered_[b]);
  }
}

TensorRef DistOptEngine::weight(int param) {
  return TensorRef{params_, layout_.offset.at(param), numel(env_.model->params()[param].shape),
                   env_.config->precision.param};
}

Task<> DistOptEngine::begin_backward(int unit) {
  int64_t n = 0;
  staging_offset_.clear();
  for (int p : env_.model->units()[unit].params) {
    staging_offset_[p] = n;
    n += numel(env_.model->params()[p].shape);
  }
  staging_ = co_await rt().alloc(n * 4, env_.streams.compute, "distopt.staging");
}

TensorRef DistOptEngine::grad(int param) {
  return TensorRef::f32(staging_, staging_offset_.at(param), numel(env_.model->params()[param].shape));
}

Task<> DistOptEngine::end_backward(int unit) {
  const StreamId compute = env_.streams.compute;
  // Megatron scales the loss by 1/microbatches; gradients then accumulate into the buffer.
  for (int p : env_.model->units()[unit].params) {
    const TensorRef g = grad(p);
    const TensorRef dst = TensorRef::f32(grads_, layout_.offset[p], g.numel);
    co_await rt().launch(kernels::divide(compute, g, g, env_.config->divisor(), "distopt.divide"));
    co_await rt().launch(kernels::add(compute, dst, g, dst, "distopt.accumulate"));
  }
  co_await rt().free(staging_);
  staging_ = -1;
  if (!env_.config->overlap) co_return;
  // Megatron's overlap_grad_reduce: a bucket is reduced as soon as its last gradient of the
  // step has landed, while the backward of the units before it runs.
  for (int p : env_.model->units()[unit].params) {
    const int b = bucket_of_.at(p);
    if (b < 0) continue;
    const int64_t want = static_cast<int64_t>(layout_.buckets[b].params.size()) * env_.config->microbatches;
    if (++landed_[b] == want) co_await reduce_bucket(static_cast<size_t>(b));
  }
}

Task<> DistOptEngine::reduce_bucket(size_t b) {
  const StreamId compute = env_.streams.compute;
  co_await rt().record(grads_ready_, compute);
  co_await rt().wait_event(comm_, grads_ready_);
  const int dp = env_.dp_size();
  const auto& bk = layout_.buckets[b];
  const TensorRef bucket = TensorRef::f32(grads_, bk.offset, bk.size);
  if (dp > 1) co_await rt().launch(kernels::divide(comm_, bucket, bucket, dp, "distopt.scale"));
  const TensorRef mine =
      TensorRef::f32(grads_, shard_start(static_cast<int>(b)), shard_size(static_cast<int>(b)));
  co_await rt().collective({CollectiveKind::reduce_scatter, dp_all_, comm_, bucket, mine, ReduceOp::sum, 0,
                            "distopt:grads" + std::to_string(b)});
  reduced_[b] = true;
}

bool DistOptEngine::tied_embedding_bucket(size_t b) const {
  const auto& bk = layout_.buckets[b];
  const ParamRole r = env_.model->params()[bk.params[0]].role;
  return embedding_ >= 0 && bk.params.size() == 1 && (r == ParamRole::embedding || r == ParamRole::output);
}

Task<> DistOptEngine::reduce_tied_embedding(size_t b) {
  if (!tied_embedding_bucket(b)) co_return;
  const TensorRef mine =
      TensorRef::f32(grads_, shard_start(static_cast<int>(b)), shard_size(static_cast<int>(b)));
  co_await rt().collective(
      {CollectiveKind::all_reduce, embedding_, comm_, mine, mine, ReduceOp::sum, 0, "embedding:grad"});
}

Task<> DistOptEngine::reduce_gradients() {
  const StreamId compute = env_.streams.compute;
  if (env_.config->overlap) {
    // Buckets not yet reduced (none in a complete backward), the tied embedding's all-reduce
    // between the first and last pipeline stages, then compute waits for every reduction and
    // for any parameter gather no forward waited for: the optimizer writes both. The
    // all-reduce waits for the backward's end, as Megatron's finalize_model_grads does: the
    // last stage's embedding gradient lands first in its backward and the first stage's last,
    // after every gradient it receives from the stages behind it, so issued when its bucket
    // is reduced it would hold the last stage's communication stream while the first stage
    // waits for that stage's sends (a deadlock once launches block, as under in_order).
    for (size_t b = 0; b < layout_.buckets.size(); ++b) {
      if (!reduced_[b]) co_await reduce_bucket(b);
      co_await reduce_tied_embedding(b);
      reduced_[b] = false;
      landed_[b] = 0;
      if (gather_pending_[b]) co_await rt().wait_event(compute, gathered_[b]);
      gather_pending_[b] = false;
    }
    co_await rt().wait_stream(compute, comm_);
    co_return;
  }
  co_await rt().record(grads_ready_, compute);
  co_await rt().wait_event(comm_, grads_ready_);
  const int dp = env_.dp_size();
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    const auto& bk = layout_.buckets[b];
    const TensorRef bucket = TensorRef::f32(grads_, bk.offset, bk.size);
    // "Scaled by 1/dp": a true division, so dp = 3 stays exact in exact mode.
    if (dp > 1) co_await rt().launch(kernels::divide(comm_, bucket, bucket, dp, "distopt.scale"));
    const TensorRef mine =
        TensorRef::f32(grads_, shard_start(static_cast<int>(b)), shard_size(static_cast<int>(b)));
    co_await rt().collective({CollectiveKind::reduce_scatter, dp_all_, comm_, bucket, mine, ReduceOp::sum, 0,
                              "distopt:grads" + std::to_string(b)});
    co_await reduce_tied_embedding(b);
  }
  co_await rt().wait_stream(compute, comm_);
}

GradNorm DistOptEngine::norm_spec() {
  GradNorm n;
  n.stream = env_.streams.compute;
  n.reduce_group = world_;
  n.sumsq = DeviceScalar::scratch("grad.sumsq");
  n.coef = coef_;
  n.norm = DeviceScalar::kept(norm_);
  n.max_norm = env_.config->optimizer.clip_grad;
  plan_.counted.clear();
  // Owned ranges never overlap across ranks, so only the tied copy is left out.
  for (const Owned& o : owned_) {
    const ParamSpec& p = env_.model->params()[o.param];
    if (!counts_in_norm(p, env_.config->mutations)) continue;
    n.terms.push_back({TensorRef::f32(grads_, o.buffer_offset, o.count), "distopt.sumsq"});
    plan_.counted.push_back({p.logical, o.first, o.count});
  }
  return n;
}

ParamUpdate DistOptEngine::update_spec(int step) const {
  const OptimizerConfig& o = env_.config->optimizer;
  const DType pd = env_.config->precision.param;
  // DistOpt casts each range right after its update (its issue order, which traces hash),
  // then all-gathers the parameters.
  ParamUpdate u{env_.streams.compute, o, step, coef_, {}, CastBack::after_each_update};
  const std::string name = "distopt." + std::string(update_kernel(o.kind));
  for (const Owned& w : owned_) {
    u.pieces.push_back({.main = TensorRef::f32(main_[w.bucket], w.shard_offset, w.count),
                        .grad = TensorRef::f32(grads_, w.buffer_offset, w.count),
                        .adam_m = TensorRef::f32(m_[w.bucket], w.shard_offset, w.count),
                        .adam_v = TensorRef::f32(v_[w.bucket], w.shard_offset, w.count),
                        .name = name,
                        .model = TensorRef{params_, w.buffer_offset, w.count, pd},
                        .cast_name = "distopt.cast"});
  }
  return u;
}

Task<> DistOptEngine::gather_params() {
  const StreamId compute = env_.streams.compute;
  const DType pd = env_.config->precision.param;
  co_await rt().record(params_ready_, compute);
  co_await rt().wait_event(comm_, params_ready_);
  if (env_.config->overlap) {
    // In forward order (the last bucket holds the first layers), each bucket's event awaited
    // by compute at its first use in the forward.
    for (size_t b = layout_.buckets.size(); b-- > 0;) {
      const auto& bk = layout_.buckets[b];
      const TensorRef mine{params_, shard_start(static_cast<int>(b)), shard_size(static_cast<int>(b)), pd};
      co_await rt().collective({CollectiveKind::all_gather, dp_all_, comm_, mine,
                                TensorRef{params_, bk.offset, bk.size, pd}, ReduceOp::sum, 0,
                                "distopt:params" + std::to_string(b)});
      co_await rt().record(gathered_[b], comm_);
      gather_pending_[b] = true;
    }
    co_return;
  }
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    const auto& bk = layout_.buckets[b];
    const TensorRef mine{params_, shard_start(static_cast<int>(b)), shard_size(static_cast<int>(b)), pd};
    co_await rt().collective({CollectiveKind::all_gather, dp_all_, comm_, mine,
                              TensorRef{params_, bk.offset, bk.size, pd}, ReduceOp::sum, 0,
                              "distopt:params" + std::to_string(b)});
  }
}

Task<> DistOptEngine::step(int step) {
  co_await reduce_gradients();
  const GradNorm n = norm_spec();
  const ParamUpdate u = update_spec(step);
  co_await optimizer_step(rt(), n, u);
  if (env_.config->overlap) {
    params_stale_ = true;  // Megatron's overlap_param_gather: gathered as the next step starts
  } else {
    co_await gather_params();
  }
}

RankView DistOptEngine::view() const {
  RankView v;
  const DType pd = env_.config->precision.param;
  for (const Owned& o : owned_) {
    const int logical = env_.model->params()[o.param].logical;
    v.main.push_back({logical, o.first, o.count, main_[o.bucket], o.shard_offset, DType::f32});
    v.grads.push_back({logical, o.first, o.count, grads_, o.buffer_offset, DType::f32});
    // Between a step and the next one's gathers (overlap) only the owned ranges are current.
    if (params_stale_) v.model.push_back({logical, o.first, o.count, params_, o.buffer_offset, pd});
  }
  if (params_stale_) return v;
  for (size_t p = 0; p < layout_.offset.size(); ++p) {
    if (layout_.offset[p] < 0) continue;
    v.model.push_back({env_.model->params()[p].logical, 0, numel(env_.model->params()[p].shape), params_,
                       layout_.offset[p], pd});
  }
  return v;
}

}  // namespace shardcheck::core
