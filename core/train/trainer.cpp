// The training loop, pipeline transfers included.
#include "core/train/trainer.hpp"

#include "core/base/trace_log.hpp"
#include "core/model/markov.hpp"
#include "core/strategies/distopt_engine.hpp"
#include "core/strategies/fsdp_engine.hpp"
#include "core/train/pipeline.hpp"
#include "core/train/tinylm_exec.hpp"

namespace shardcheck::core {

namespace {

// Point-to-point streams: one per direction and role, so each channel's sends and receives
// pair up in order without waiting behind other traffic.
struct PipeStreams {
  StreamId fwd_send = -1, fwd_recv = -1, bwd_send = -1, bwd_recv = -1;
};

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(T)};
}

class Loop {
 public:
  Loop(Runtime& rt, const TrainingSetup& s, Observer* obs, RankResult* out)
      : rt_(rt), s_(s), obs_(obs), out_(out), data_(s.config.model.vocab, s.config.data_seed) {}

  Task<> run() {
    EngineEnv env;
    env.rt = &rt_;
    env.model = s_.model.get();
    env.config = &s_.config;
    env.mesh = s_.mesh;
    env.rank = rt_.rank();
    env.streams.compute = rt_.stream("compute");
    env.units = units_of_rank(*s_.model, env.pp_rank());
    env_ = env;
    std::unique_ptr<Engine> engine;
    if (s_.config.strategy == Strategy::distopt) {
      engine = std::make_unique<DistOptEngine>(env);
    } else {
      engine = std::make_unique<FsdpEngine>(env);
    }
    if (env.pp() > 1) {
      pipe_ = {rt_.stream("p2p.fwd.send"), rt_.stream("p2p.fwd.recv"), rt_.stream("p2p.bwd.send"),
               rt_.stream("p2p.bwd.recv")};
    }
    co_await engine->setup();
    co_await rt_.sync_device();  // the observer reads what initialization wrote
    if (obs_) co_await obs_->on_initialized(rt_, engine->view());
    ExecOptions eo;
    eo.rows = rows();
    eo.act = activation_dtype(s_.config.precision);
    eo.grid = s_.grid;
    eo.round_bf16_grads = !s_.config.precision.exact && s_.config.precision.param == DType::bf16;
    TinyLmExec exec(rt_, *s_.model, *engine, env.streams, eo);
    for (int step = 0; step < s_.config.steps; ++step) co_await train_step(*engine, exec, step);
  }

 private:
  int64_t rows() const { return static_cast<int64_t>(s_.config.micro_batch_size) * s_.config.model.seq; }
  DType act() const { return activation_dtype(s_.config.precision); }
  int last_vstage() const { return s_.model->virtual_stages() - 1; }

  Task<BufferId> upload_tokens(const std::vector<int32_t>& v, const char* what) {
    const BufferId b = co_await rt_.alloc(rows() * 4, env_.streams.compute, what);
    co_await rt_.upload(TensorRef{b, 0, rows(), DType::i32}, env_.streams.compute, bytes_of(v));
    co_return b;
  }

  Task<BufferId> receive(int peer, StreamId stream, const std::string& tag, const std::string& channel) {
    const StreamId compute = env_.streams.compute;
    const BufferId b =
        co_await rt_.alloc(rows() * s_.config.model.hidden * dtype_bytes(act()), compute, "recv:" + tag);
    co_await rt_.wait_stream(stream, compute);  // earlier uses of a reused block are done
    co_await rt_.recv(
        P2PCall{peer, stream, TensorRef{b, 0, rows() * s_.config.model.hidden, act()}, tag, channel});
    co_await rt_.wait_stream(compute, stream);
    co_return b;
  }

  Task<> send(BufferId b, int peer, StreamId stream, const std::string& tag, const std::string& channel) {
    co_await rt_.wait_stream(stream, env_.streams.compute);
    co_await rt_.send(
        P2PCall{peer, stream, TensorRef{b, 0, rows() * s_.config.model.hidden, act()}, tag, channel});
    co_await rt_.record_stream(b, stream);
    co_await rt_.free(b);
  }

  int neighbour(int vstage) const {
    std::vector<int> c = s_.mesh->coords(rt_.rank());
    c[s_.mesh->axis("pp")] = s_.model->stage_rank(vstage);
    return s_.mesh->rank_of(c);
  }

  Task<> forward(TinyLmExec& exec, int step, int chunk, int mb, BufferId losses) {
    const int v = s_.model->vstage_of(env_.pp_rank(), chunk);
    const Batch b = data_.batch(step, env_.dp_rank(), mb, s_.config.micro_batch_size, s_.config.model.seq);
    const std::string tag = "act:" + std::to_string(v) + ":mb" + std::to_string(mb);
    const BufferId input =
        v == 0 ? co_await upload_tokens(b.inputs, "tokens")
               : co_await receive(neighbour(v - 1), pipe_.fwd_recv,
                                  "act:" + std::to_string(v - 1) + ":mb" + std::to_string(mb), "pp.fwd");
    const BufferId targets = v == last_vstage() ? co_await upload_tokens(b.targets, "targets") : -1;
    auto out = co_await exec.forward(v, mb, input, targets, TensorRef::f32(losses, mb, 1));
    if (out) co_await send(*out, neighbour(v + 1), pipe_.fwd_send, tag, "pp.fwd");
  }

  Task<> backward(Engine& engine, TinyLmExec& exec, int chunk, int mb) {
    const int v = s_.model->vstage_of(env_.pp_rank(), chunk);
    // Non-last microbatches run under no_sync (is_last = false); the mutation forgets to.
    const bool last = mb == s_.config.microbatches - 1;
    if (!s_.config.mutations.has(Mutation::zero1_missing_no_sync) || last) engine.set_last_microbatch(last);
    const BufferId dy =
        v == last_vstage()
            ? -1
            : co_await receive(neighbour(v + 1), pipe_.bwd_recv,
                               "grad:" + std::to_string(v + 1) + ":mb" + std::to_string(mb), "pp.bwd");
    auto dx = co_await exec.backward(v, mb, dy);
    if (dx)
      co_await send(*dx, neighbour(v - 1), pipe_.bwd_send,
                    "grad:" + std::to_string(v) + ":mb" + std::to_string(mb), "pp.bwd");
  }

  Task<> train_step(Engine& engine, TinyLmExec& exec, int step) {
    const StreamId compute = env_.streams.compute;
    const int mbs = s_.config.microbatches;
    co_await engine.begin_step(step);
    const BufferId losses = co_await rt_.alloc(mbs * 4, compute, "losses");
    co_await rt_.launch(kernels::fill(compute, TensorRef::f32(losses, 0, mbs), 0.0, "losses.init"));
    for (const PipelineAction& a : pipeline_schedule(env_.pp(), s_.model->vpp(), env_.pp_rank(), mbs)) {
      if (a.kind == PipelineAction::Kind::forward) {
        co_await forward(exec, step, a.chunk, a.microbatch, losses);
      } else {
        co_await backward(engine, exec, a.chunk, a.microbatch);
      }
    }
    co_await engine.finish_backward();
    co_await engine.step(step);
    std::vector<float> l(mbs);
    double norm = 0;
    co_await rt_.download(TensorRef::f32(losses, 0, mbs), compute,
                          {reinterpret_cast<std::byte*>(l.data()), l.size() * 4});
    co_await rt_.download(engine.norm_value(), compute, {reinterpret_cast<std::byte*>(&norm), 8});
    co_await rt_.free(losses);
    co_await rt_.sync_device();
    rt_.mark(core::step_end_mark(step));
    const bool has_loss = s_.model->stage_rank(last_vstage()) == env_.pp_rank();
    if (out_) {
      out_->losses.push_back(has_loss ? l : std::vector<float>{});
      out_->norms.push_back(norm);
    }
    if (obs_) co_await obs_->on_step_end(rt_, step, engine.view(), norm, engine.norm_plan());
  }

  Runtime& rt_;
  const TrainingSetup& s_;
  Observer* obs_;
  RankResult* out_;
  MarkovSource data_;  // built once per run: its stationary distribution takes a power iteration
  EngineEnv env_;
  PipeStreams pipe_;
};

}  // namespace

Expected<TrainingSetup> make_training_setup(const TrainingConfig& config, std::shared_ptr<const Mesh> mesh) {
  TrainingSetup s;
  s.config = config;
  s.mesh = mesh;
  auto model = ModelLayout::create(config.model, mesh->size_or_one("pp"), mesh->virtual_stages());
  if (!model) return model.error();
  s.model = std::make_shared<const ModelLayout>(std::move(model).value());
  s.dp = mesh->size_or_one("dp") * mesh->size_or_one("dp_outer") * mesh->size_or_one("dp_inner");
  if (config.precision.exact) s.grid = exact_grid(s.dp, config.microbatches, s.model->num_logical_elements());
  return s;
}

Task<> train_rank(Runtime& rt, const TrainingSetup& setup, Observer* observer, RankResult* result) {
  Loop loop(rt, setup, observer, result);
  co_await loop.run();
}

std::vector<double> mean_losses(const std::vector<RankResult>& ranks, int steps) {
  std::vector<double> out;
  for (int step = 0; step < steps; ++step) {
    double sum = 0;
    int n = 0;
    for (const auto& r : ranks) {
      if (step >= static_cast<int>(r.losses.size())) continue;
      for (float l : r.losses[step]) sum += l, ++n;
    }
    out.push_back(n ? sum / n : 0.0);
  }
  return out;
}

}  // namespace shardcheck::core
