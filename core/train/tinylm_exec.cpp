// TinyLM forward and backward as kernel launches.
#include "core/train/tinylm_exec.hpp"

namespace shardcheck::core {

namespace {
kernel::Gemm shape(int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  kernel::Gemm g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = ta;
  g.trans_b = tb;
  return g;
}
int64_t round16(int64_t bytes) { return (bytes + 15) / 16 * 16; }
}  // namespace

TinyLmExec::TinyLmExec(Runtime& rt, const ModelLayout& model, Engine& engine, Streams streams,
                       ExecOptions options)
    : rt_(rt), model_(model), engine_(engine), s_(streams), o_(options) {
  embedding_param_ = model_.units()[0].params[0];
}

int64_t TinyLmExec::carved_bytes(std::initializer_list<int64_t> widths) const {
  int64_t bytes = round16(8 * o_.rows);
  for (int64_t w : widths) bytes += round16(act_bytes(o_.rows * w));
  return bytes;
}

TinyLmExec::Carved TinyLmExec::carve(BufferId b, std::initializer_list<int64_t> widths) const {
  // Statistics first: every later offset is 16-byte aligned, so it is a whole number of
  // elements of either dtype.
  Carved c{TensorRef::f32(b, 0, o_.rows), TensorRef::f32(b, o_.rows, o_.rows), {}};
  int64_t at = round16(8 * o_.rows);
  const int64_t es = dtype_bytes(o_.act);
  for (int64_t w : widths) {
    c.t.push_back(act(b, at / es, o_.rows * w));
    at += round16(act_bytes(o_.rows * w));
  }
  return c;
}

int TinyLmExec::param_of(int unit, ParamRole role) const {
  for (int p : model_.units()[unit].params) {
    if (model_.params()[p].role == role) return p;
  }
  throw InternalError("unit " + model_.units()[unit].name + " has no such parameter");
}

bool TinyLmExec::fused_rounding() const { return !o_.grid && o_.round_bf16_grads; }

Task<> TinyLmExec::finish_grad(TensorRef g) {
  if (o_.grid) {
    co_await rt_.launch(kernels::round_to_grid(s_.compute, g, g, o_.grid->q, o_.grid->limit));
  } else if (o_.round_bf16_grads) {
    co_await rt_.launch(kernels::round_bf16(s_.compute, g, g));
  }
}

Task<> TinyLmExec::acquire(int unit) {
  co_await engine_.acquire(unit);
  if (next_unit_ >= 0) co_await engine_.prefetch(next_unit_);
  next_unit_ = -1;
}

Task<BufferId> TinyLmExec::embedding_forward(int unit, BufferId tokens) {
  const int64_t N = o_.rows, H = hidden(), V = model_.config().vocab;
  co_await acquire(unit);
  const BufferId x = co_await rt_.alloc(act_bytes(N * H), s_.compute, "embedding.out");
  co_await rt_.launch(kernels::embedding_forward(s_.compute, TensorRef{tokens, 0, N, DType::i32},
                                                 engine_.weight(embedding_param_), act(x, 0, N * H), V, H));
  co_await engine_.release(unit);
  co_return x;
}

Task<BufferId> TinyLmExec::block_forward(int unit, BufferId x, BlockActs& a) {
  const int64_t N = o_.rows, H = hidden(), F = 4 * H;
  co_await acquire(unit);
  a.acts = co_await rt_.alloc(carved_bytes({H, F, F}), s_.compute, model_.units()[unit].name + ".acts");
  const Carved c = carve(a.acts, {H, F, F});
  const TensorRef ln_y = c.t[0], pre = c.t[1], post = c.t[2];
  const BufferId y = co_await rt_.alloc(act_bytes(N * H), s_.compute, model_.units()[unit].name + ".out");
  const TensorRef xr = act(x, 0, N * H), yr = act(y, 0, N * H);
  auto w = [&](ParamRole r) { return engine_.weight(param_of(unit, r)); };
  co_await rt_.launch(kernels::layernorm_forward(s_.compute, xr, w(ParamRole::ln1_w), w(ParamRole::ln1_b),
                                                 ln_y, c.mean, c.rstd, N, H));
  co_await rt_.launch(
      kernels::gemm(s_.compute, ln_y, w(ParamRole::fc1_w), pre, shape(N, F, H, false, true), "fc1"));
  co_await rt_.launch(kernels::bias_gelu(s_.compute, pre, w(ParamRole::fc1_b), pre, post, N, F));
  co_await rt_.launch(
      kernels::gemm(s_.compute, post, w(ParamRole::fc2_w), yr, shape(N, H, F, false, true), "fc2"));
  co_await rt_.launch(kernels::bias_add(s_.compute, yr, w(ParamRole::fc2_b), yr, N, H));
  co_await rt_.launch(kernels::add(s_.compute, yr, xr, yr, "residual"));
  co_await engine_.release(unit);
  co_return y;
}

Task<> TinyLmExec::head_forward(int unit, BufferId x, BufferId targets, TensorRef loss, StageActs& s) {
  const int64_t N = o_.rows, H = hidden(), V = model_.config().vocab;
  const bool tied_here =
      model_.config().tied && model_.params()[model_.units()[unit].params.back()].role != ParamRole::output;
  co_await acquire(unit);
  if (tied_here) co_await engine_.acquire(0);  // the output projection is the embedding itself
  s.head = co_await rt_.alloc(carved_bytes({H, V}), s_.compute, "head.acts");
  const Carved c = carve(s.head, {H, V});
  const TensorRef z = c.t[0], dlogits = c.t[1];
  const TensorRef out_w = engine_.weight(tied_here ? embedding_param_ : param_of(unit, ParamRole::output));
  co_await rt_.launch(kernels::layernorm_forward(
      s_.compute, act(x, 0, N * H), engine_.weight(param_of(unit, ParamRole::lnf_w)),
      engine_.weight(param_of(unit, ParamRole::lnf_b)), z, c.mean, c.rstd, N, H));
  const BufferId logits = co_await rt_.alloc(act_bytes(N * V), s_.compute, "logits");
  co_await rt_.launch(
      kernels::gemm(s_.compute, z, out_w, act(logits, 0, N * V), shape(N, V, H, false, true), "output"));
  co_await rt_.launch(kernels::softmax_cross_entropy(s_.compute, act(logits, 0, N * V),
                                                     TensorRef{targets, 0, N, DType::i32}, dlogits, loss, N,
                                                     V, 1.0 / static_cast<double>(N)));
  co_await rt_.free(logits);
  if (tied_here) co_await engine_.release(0);
  co_await engine_.release(unit);
}

Task<std::optional<BufferId>> TinyLmExec::forward(int v, int mb, BufferId input, BufferId targets,
                                                  TensorRef loss) {
  StageActs& s = stages_[{v, mb}];
  const std::vector<int> units = model_.units_of(v);
  BufferId x = input;
  for (size_t i = 0; i < units.size(); ++i) {
    const int u = units[i];
    next_unit_ = i + 1 < units.size() ? units[i + 1] : -1;  // every unit acquires in forward
    switch (model_.units()[u].kind) {
      case Unit::Kind::embedding:
        s.tokens = input;
        x = co_await embedding_forward(u, input);
        break;
      case Unit::Kind::block:
        s.xs.push_back(x);
        s.blocks.emplace_back();
        x = co_await block_forward(u, x, s.blocks.back());
        break;
      case Unit::Kind::head:
        s.xs.push_back(x);
        s.targets = targets;
        co_await head_forward(u, x, targets, loss, s);
        co_return std::nullopt;
    }
  }
  s.output_returned = true;
  co_return x;
}

Task<BufferId> TinyLmExec::head_backward(int unit, BufferId x, StageActs& s, int mb) {
  const int64_t N = o_.rows, H = hidden(), V = model_.config().vocab;
  const bool tied_here =
      model_.config().tied && model_.params()[model_.units()[unit].params.back()].role != ParamRole::output;
  co_await acquire(unit);
  if (tied_here) co_await engine_.acquire(0);
  co_await engine_.begin_backward(unit);
  const Carved c = carve(s.head, {H, V});
  const TensorRef z = c.t[0], dlogits = c.t[1];
  TensorRef dw;
  if (tied_here) {
    // The output use of the tied embedding: its gradient waits for the embedding's backward.
    const BufferId pending = co_await rt_.alloc(V * H * 4, s_.compute, "tied.output_grad");
    tied_pending_[mb] = pending;
    dw = TensorRef::f32(pending, 0, V * H);
  } else {
    dw = engine_.grad(param_of(unit, ParamRole::output));
  }
  co_await rt_.launch(kernels::gemm(s_.compute, dlogits, z, dw, shape(V, H, N, true, false), "output.wgrad"));
  co_await finish_grad(dw);
  const TensorRef out_w = engine_.weight(tied_here ? embedding_param_ : param_of(unit, ParamRole::output));
  const BufferId dz = co_await rt_.alloc(act_bytes(N * H), s_.compute, "head.dz");
  co_await rt_.launch(kernels::gemm(s_.compute, dlogits, out_w, act(dz, 0, N * H),
                                    shape(N, H, V, false, false), "output.dgrad"));
  const BufferId dx = co_await rt_.alloc(act_bytes(N * H), s_.compute, "head.dx");
  const TensorRef gw = engine_.grad(param_of(unit, ParamRole::lnf_w)),
                  gb = engine_.grad(param_of(unit, ParamRole::lnf_b));
  co_await rt_.launch(kernels::layernorm_backward(s_.compute, act(dz, 0, N * H), act(x, 0, N * H),
                                                  engine_.weight(param_of(unit, ParamRole::lnf_w)), c.mean,
                                                  c.rstd, act(dx, 0, N * H), gw, gb, N, H, fused_rounding()));
  if (!fused_rounding()) {
    co_await finish_grad(gw);
    co_await finish_grad(gb);
  }
  co_await rt_.free(dz);
  co_await engine_.end_backward(unit);
  if (tied_here) co_await engine_.release(0);
  co_await engine_.release(unit);
  co_return dx;
}

Task<BufferId> TinyLmExec::block_backward(int unit, BufferId x, BlockActs& a, BufferId dy) {
  const int64_t N = o_.rows, H = hidden(), F = 4 * H;
  co_await acquire(unit);
  co_await engine_.begin_backward(unit);
  const Carved c = carve(a.acts, {H, F, F});
  const TensorRef ln_y = c.t[0], pre = c.t[1], post = c.t[2];
  const TensorRef dyr = act(dy, 0, N * H);
  auto w = [&](ParamRole r) { return engine_.weight(param_of(unit, r)); };
  auto g = [&](ParamRole r) { return engine_.grad(param_of(unit, r)); };
  co_await rt_.launch(
      kernels::gemm(s_.compute, dyr, post, g(ParamRole::fc2_w), shape(H, F, N, true, false), "fc2.wgrad"));
  co_await rt_.launch(kernels::bias_grad(s_.compute, dyr, g(ParamRole::fc2_b), N, H, fused_rounding()));
  const BufferId tmp =
      co_await rt_.alloc(carved_bytes({F, H}), s_.compute, model_.units()[unit].name + ".dgrad");
  const Carved t = carve(tmp, {F, H});
  const TensorRef dpost = t.t[0], dln = t.t[1];
  co_await rt_.launch(
      kernels::gemm(s_.compute, dyr, w(ParamRole::fc2_w), dpost, shape(N, F, H, false, false), "fc2.dgrad"));
  co_await rt_.launch(kernels::gelu_backward(s_.compute, pre, dpost, dpost));
  co_await rt_.launch(
      kernels::gemm(s_.compute, dpost, ln_y, g(ParamRole::fc1_w), shape(F, H, N, true, false), "fc1.wgrad"));
  co_await rt_.launch(kernels::bias_grad(s_.compute, dpost, g(ParamRole::fc1_b), N, F, fused_rounding()));
  co_await rt_.launch(
      kernels::gemm(s_.compute, dpost, w(ParamRole::fc1_w), dln, shape(N, H, F, false, false), "fc1.dgrad"));
  const BufferId dx = co_await rt_.alloc(act_bytes(N * H), s_.compute, model_.units()[unit].name + ".dx");
  co_await rt_.launch(kernels::layernorm_backward(s_.compute, dln, act(x, 0, N * H), w(ParamRole::ln1_w),
                                                  c.mean, c.rstd, act(dx, 0, N * H), g(ParamRole::ln1_w),
                                                  g(ParamRole::ln1_b), N, H, fused_rounding()));
  co_await rt_.launch(kernels::add(s_.compute, act(dx, 0, N * H), dyr, act(dx, 0, N * H), "residual.grad"));
  // The matrix products' gradients are rounded here; the column sums' were rounded as they
  // were stored when the rounding is fused (mixed precision), and are rounded here otherwise.
  for (ParamRole r : {ParamRole::ln1_w, ParamRole::ln1_b, ParamRole::fc1_w, ParamRole::fc1_b,
                      ParamRole::fc2_w, ParamRole::fc2_b}) {
    const bool column_sum = r != ParamRole::fc1_w && r != ParamRole::fc2_w;
    if (!(column_sum && fused_rounding())) co_await finish_grad(g(r));
  }
  co_await rt_.free(tmp);
  co_await engine_.end_backward(unit);
  co_await engine_.release(unit);
  co_return dx;
}

Task<> TinyLmExec::embedding_backward(int unit, BufferId tokens, BufferId dx, int mb) {
  const int64_t N = o_.rows, H = hidden(), V = model_.config().vocab;
  // The gradient of a lookup needs no weights, but FSDP unshards every module before its
  // backward whatever the module computes (Megatron-FSDP's pre_backward, FSDP2's too): the
  // embedding's weights are gathered again here, as the captures of the real code show
  // (docs/fidelity.md).
  co_await acquire(unit);
  co_await engine_.begin_backward(unit);
  const TensorRef gw = engine_.grad(embedding_param_);
  co_await rt_.launch(kernels::embedding_backward(s_.compute, TensorRef{tokens, 0, N, DType::i32},
                                                  act(dx, 0, N * H), gw, V, H, fused_rounding()));
  if (!fused_rounding()) co_await finish_grad(gw);
  if (auto it = tied_pending_.find(mb); it != tied_pending_.end()) {
    // Each use was rounded on its own: their sum is a grid value too.
    co_await rt_.launch(kernels::add(s_.compute, gw, TensorRef::f32(it->second, 0, V * H), gw, "tied.sum"));
    co_await rt_.free(it->second);
    tied_pending_.erase(it);
  }
  co_await engine_.end_backward(unit);
  co_await engine_.release(unit);
}

Task<std::optional<BufferId>> TinyLmExec::backward(int v, int mb, BufferId dy) {
  auto it = stages_.find({v, mb});
  if (it == stages_.end()) throw InternalError("backward before forward");
  StageActs& s = it->second;
  const std::vector<int> units = model_.units_of(v);
  BufferId grad = dy;
  std::optional<BufferId> result;
  for (auto u = units.rbegin(); u != units.rend(); ++u) {
    const Unit& unit = model_.units()[*u];
    // Every unit is unsharded for its backward, the embedding too (embedding_backward), so the
    // next one is prefetched whatever it is.
    next_unit_ = u + 1 != units.rend() ? *(u + 1) : -1;
    if (unit.kind == Unit::Kind::head) {
      const BufferId x = s.xs.back();
      s.xs.pop_back();
      grad = co_await head_backward(*u, x, s, mb);
      co_await rt_.free(s.head);
      co_await rt_.free(s.targets);
      co_await rt_.free(x);
    } else if (unit.kind == Unit::Kind::block) {
      BlockActs acts = s.blocks.back();
      s.blocks.pop_back();
      const BufferId x = s.xs.back();
      s.xs.pop_back();
      const BufferId dx = co_await block_backward(*u, x, acts, grad);
      co_await rt_.free(acts.acts);
      co_await rt_.free(grad);
      // The stage's own input stays the caller's until here; block outputs are ours.
      co_await rt_.free(x);
      grad = dx;
    } else {
      co_await embedding_backward(*u, s.tokens, grad, mb);
      co_await rt_.free(grad);
      co_await rt_.free(s.tokens);
      grad = -1;
    }
  }
  if (grad >= 0) result = grad;
  stages_.erase(it);
  co_return result;
}

}  // namespace shardcheck::core
