// The reference engine (one group over all parameters, D = 1) and its training loop.
#include "core/train/reference.hpp"

#include <cstring>
#include <map>

#include "core/model/markov.hpp"
#include "core/runtime/inorder_runtime.hpp"
#include "core/strategies/engine.hpp"
#include "core/strategies/optimizer_step.hpp"
#include "core/train/tinylm_exec.hpp"

namespace shardcheck::core {

namespace {

class ReferenceEngine final : public Engine {
 public:
  ReferenceEngine(Runtime& rt, const ModelLayout& m, const TrainingConfig& c, Streams s, int dp)
      : rt_(rt), m_(m), c_(c), s_(s), dp_(dp) {
    std::vector<Shape> shapes;
    for (const auto& p : m.params()) shapes.push_back(p.shape);
    layout_ = GlobalLayout::create(shapes, 1).value();
  }

  Task<> setup() override {
    const int64_t n = layout_.size();
    main_ = co_await rt_.alloc(n * 4, s_.compute, "ref.main");
    accum_ = co_await rt_.alloc(n * 4, s_.compute, "ref.grad");
    adam_m_ = co_await rt_.alloc(n * 4, s_.compute, "ref.adam_m");
    adam_v_ = co_await rt_.alloc(n * 4, s_.compute, "ref.adam_v");
    norm_ = co_await rt_.alloc(8, s_.compute, "ref.norm");
    coef_ = co_await rt_.alloc(8, s_.compute, "ref.coef");
    for (BufferId b : {adam_m_, adam_v_})
      co_await rt_.launch(kernels::fill(s_.compute, TensorRef::f32(b, 0, n), 0.0));
    for (size_t p = 0; p < m_.params().size(); ++p) {
      const std::vector<float> v = m_.initial_value(m_.params()[p].logical);
      co_await rt_.upload(slot(static_cast<int>(p), main_, DType::f32), s_.compute,
                          {reinterpret_cast<const std::byte*>(v.data()), v.size() * 4});
    }
    const DType pd = c_.precision.param;
    model_ = main_;
    if (pd == DType::bf16)
      co_await rt_.launch(
          kernels::round_bf16(s_.compute, TensorRef::f32(main_, 0, n), TensorRef::f32(main_, 0, n)));
    if (pd != DType::f32) {
      model_ = co_await rt_.alloc(n * dtype_bytes(pd), s_.compute, "ref.model");
      co_await cast();
    }
  }

  Task<> begin_step(int) override {
    first_.assign(m_.params().size(), true);
    co_return;
  }
  Task<> acquire(int) override { co_return; }
  Task<> release(int) override { co_return; }
  TensorRef weight(int p) override { return slot(p, model_, c_.precision.param); }

  Task<> begin_backward(int unit) override {
    int64_t n = 0;
    offsets_.clear();
    for (int p : m_.units()[unit].params) {
      offsets_[p] = n;
      n += numel(m_.params()[p].shape);
    }
    staging_ = co_await rt_.alloc(n * 4, s_.compute, "ref.staging");
  }
  TensorRef grad(int p) override {
    return TensorRef::f32(staging_, offsets_.at(p), numel(m_.params()[p].shape));
  }

  Task<> end_backward(int unit) override {
    for (int p : m_.units()[unit].params) {
      const TensorRef g = grad(p), dst = slot(p, accum_, DType::f32);
      co_await rt_.launch(kernels::divide(s_.compute, g, g, c_.divisor()));
      if (first_[p]) {
        co_await rt_.launch(kernels::copy(s_.compute, g, dst));
      } else {
        co_await rt_.launch(kernels::add(s_.compute, dst, g, dst));
      }
      first_[p] = false;
    }
    co_await rt_.free(staging_);
  }

  void set_last_microbatch(bool) override {}
  Task<> finish_backward() override { co_return; }

  Task<> step(int step) override {
    const OptimizerConfig& o = c_.optimizer;
    // One rank holds every parameter once: nothing to reduce across ranks or leave out.
    GradNorm n;
    n.stream = s_.compute;
    n.sumsq = DeviceScalar::kept(norm_);
    n.coef = coef_;
    n.norm = DeviceScalar::scratch("ref.norm_value");
    n.max_norm = o.clip_grad;
    // The average over data-parallel ranks, as every strategy's reduction computes it.
    n.divide_first = dp_;
    n.norm_host = &last_norm_;
    ParamUpdate u{s_.compute, o, step, coef_, {}, CastBack::after_all_updates};
    for (size_t p = 0; p < m_.params().size(); ++p) {
      const int pi = static_cast<int>(p);
      n.terms.push_back({slot(pi, accum_, DType::f32), "sum_squares"});
      UpdatePiece piece{.main = slot(pi, main_, DType::f32),
                        .grad = slot(pi, accum_, DType::f32),
                        .adam_m = slot(pi, adam_m_, DType::f32),
                        .adam_v = slot(pi, adam_v_, DType::f32),
                        .name = std::string(update_kernel(o.kind))};
      // With fp32 parameters the model weights are the main weights: nothing to cast.
      if (model_ != main_) piece.model = slot(pi, model_, c_.precision.param);
      u.pieces.push_back(std::move(piece));
    }
    co_await optimizer_step(rt_, n, u);
  }

  TensorRef norm_value() override { return TensorRef{norm_, 0, 1, DType::f64}; }
  RankView view() const override { return {}; }
  const NormPlan& norm_plan() const override { return plan_; }

  double last_norm() const { return last_norm_; }
  // Downloads one logical parameter from a buffer (main weights or gradients).
  Task<std::vector<float>> fetch(int p, bool grads) {
    std::vector<float> v(static_cast<size_t>(numel(m_.params()[p].shape)));
    co_await rt_.download(slot(p, grads ? accum_ : main_, DType::f32), s_.compute,
                          {reinterpret_cast<std::byte*>(v.data()), v.size() * 4});
    co_return v;
  }

 private:
  TensorRef slot(int p, BufferId b, DType t) const {
    const TensorSlot& s = layout_.tensor(p);
    return TensorRef{b, s.offset, s.numel, t};
  }
  Task<> cast() {
    for (size_t p = 0; p < m_.params().size(); ++p) {
      co_await rt_.launch(kernels::copy(s_.compute, slot(static_cast<int>(p), main_, DType::f32),
                                        slot(static_cast<int>(p), model_, c_.precision.param)));
    }
  }

  Runtime& rt_;
  const ModelLayout& m_;
  const TrainingConfig& c_;
  Streams s_;
  int dp_;
  GlobalLayout layout_;
  BufferId main_ = -1, model_ = -1, accum_ = -1, adam_m_ = -1, adam_v_ = -1, norm_ = -1, coef_ = -1,
           staging_ = -1;
  std::map<int, int64_t> offsets_;
  std::vector<bool> first_;
  NormPlan plan_;
  double last_norm_ = 0;
};

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(T)};
}

Task<> reference_loop(Runtime& rt, const TrainingConfig& c, int dp, CancelToken cancel,
                      ReferenceResult* out) {
  const ModelLayout model = ModelLayout::create(c.model, 1, 1).value();
  const Streams s{rt.stream("compute"), rt.stream("compute"), rt.stream("compute")};
  ReferenceEngine engine(rt, model, c, s, dp);
  co_await engine.setup();
  const int64_t rows = static_cast<int64_t>(c.micro_batch_size) * c.model.seq;
  ExecOptions eo;
  eo.rows = rows;
  eo.act = activation_dtype(c.precision);
  if (c.precision.exact) eo.grid = exact_grid(dp, c.microbatches, model.num_logical_elements());
  eo.round_bf16_grads = !c.precision.exact && c.precision.param == DType::bf16;
  TinyLmExec exec(rt, model, engine, s, eo);
  const MarkovSource data(c.model.vocab, c.data_seed);
  for (const auto& p : model.params()) out->initial.push_back(model.initial_value(p.logical));
  for (int step = 0; step < c.steps; ++step) {
    co_await engine.begin_step(step);
    const BufferId losses =
        co_await rt.alloc(static_cast<int64_t>(dp) * c.microbatches * 4, s.compute, "ref.losses");
    for (int mb = 0; mb < c.microbatches; ++mb) {
      for (int r = 0; r < dp; ++r) {
        cancel.poll();
        const Batch b = data.batch(step, r, mb, c.micro_batch_size, c.model.seq);
        const BufferId tokens = co_await rt.alloc(rows * 4, s.compute, "tokens");
        const BufferId targets = co_await rt.alloc(rows * 4, s.compute, "targets");
        co_await rt.upload(TensorRef{tokens, 0, rows, DType::i32}, s.compute, bytes_of(b.inputs));
        co_await rt.upload(TensorRef{targets, 0, rows, DType::i32}, s.compute, bytes_of(b.targets));
        const int id = mb * dp + r;
        co_await exec.forward(0, id, tokens, targets, TensorRef::f32(losses, r * c.microbatches + mb, 1));
        co_await exec.backward(0, id, -1);
      }
    }
    co_await engine.step(step);
    ReferenceStep rs;
    rs.losses.resize(static_cast<size_t>(dp) * c.microbatches);
    co_await rt.download(TensorRef::f32(losses, 0, static_cast<int64_t>(rs.losses.size())), s.compute,
                         {reinterpret_cast<std::byte*>(rs.losses.data()), rs.losses.size() * 4});
    co_await rt.free(losses);
    for (float l : rs.losses) rs.loss += l;
    rs.loss /= static_cast<double>(rs.losses.size());
    rs.grad_norm = engine.last_norm();
    for (size_t p = 0; p < model.params().size(); ++p) {
      rs.main.push_back(co_await engine.fetch(static_cast<int>(p), false));
      rs.grads.push_back(co_await engine.fetch(static_cast<int>(p), true));
    }
    out->steps.push_back(std::move(rs));
  }
}

}  // namespace

ReferenceResult run_reference(const TrainingConfig& config, int dp, CancelToken cancel) {
  ReferenceResult out;
  out.entropy_rate = MarkovSource(config.model.vocab, config.data_seed).entropy_rate();
  InOrderWorld world(1);
  world.cancel = cancel;
  world.run([&](Runtime& rt) { return reference_loop(rt, config, dp, cancel, &out); });
  return out;
}

}  // namespace shardcheck::core
