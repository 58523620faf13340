// TinyLM's layers as kernel launches on the compute stream, written once for every engine.
// A virtual pipeline stage runs its units in order: the embedding (first stage), its blocks,
// and the head (last stage: final LayerNorm, output projection, softmax cross-entropy). The
// engine supplies weights (acquire/weight/release) and gradient staging (begin_backward/
// grad/end_backward); this class owns the activations between a stage's forward and its
// backward.
//   TinyLmExec exec(rt, model, engine, streams, options);
//   auto out = co_await exec.forward(vstage, mb, input, targets, loss_slot);
//   auto dx  = co_await exec.backward(vstage, mb, dy);
#pragma once

#include <map>
#include <optional>

#include "core/model/model.hpp"
#include "core/strategies/engine.hpp"
#include "core/strategies/training_config.hpp"

namespace shardcheck::core {

struct ExecOptions {
  int64_t rows = 0;               // tokens per microbatch: micro_batch_size * seq
  DType act = DType::f32;         // activations and their gradients (activation_dtype)
  std::optional<ExactGrid> grid;  // exact mode: every gradient contribution is grid-rounded
  bool round_bf16_grads = false;  // mixed precision: gradients rounded as bf16
};

class TinyLmExec {
 public:
  TinyLmExec(Runtime& rt, const ModelLayout& model, Engine& engine, Streams streams, ExecOptions options);

  // Takes ownership of `input` (tokens, i32 rows, on the first virtual stage; else the
  // rows x H activation, in the activation dtype, from the previous stage) and of `targets` (i32 rows, last
  // stage only, else an empty ref). On the last stage it writes the microbatch's loss into `loss` and returns
  // nothing; otherwise it returns the stage output, which the caller sends and frees.
  Task<std::optional<BufferId>> forward(int vstage, int mb, BufferId input, BufferId targets, TensorRef loss);
  // Takes ownership of `dy` (the output gradient from the next stage; -1 on the last
  // stage). Returns dx for the previous stage (caller sends and frees), or nothing on the
  // first stage. Frees the stage's activations.
  Task<std::optional<BufferId>> backward(int vstage, int mb, BufferId dy);

  int64_t rows() const { return o_.rows; }
  int64_t hidden() const { return model_.config().hidden; }

 private:
  struct BlockActs {
    BufferId acts = -1;  // mean [N] f32, rstd [N] f32, ln_y [N H], pre-GELU [N F], post-GELU [N F]
  };
  struct StageActs {
    BufferId tokens = -1, targets = -1;
    std::vector<BufferId> xs;  // xs[i]: input of block i; xs.back(): input of the head
    std::vector<BlockActs> blocks;
    BufferId head = -1;  // mean [N] f32, rstd [N] f32, z [N H], dlogits [N V]
    bool output_returned = false;
  };

  Task<BufferId> embedding_forward(int unit, BufferId tokens);
  Task<BufferId> block_forward(int unit, BufferId x, BlockActs& acts);
  Task<> head_forward(int unit, BufferId x, BufferId targets, TensorRef loss, StageActs& s);
  Task<BufferId> head_backward(int unit, BufferId x, StageActs& s, int mb);
  Task<BufferId> block_backward(int unit, BufferId x, BlockActs& acts, BufferId dy);
  Task<> embedding_backward(int unit, BufferId tokens, BufferId dx, int mb);
  Task<> finish_grad(TensorRef g);  // exact-mode rounding or bf16 rounding, in place
  // Mixed precision without the exact grid: the column sums (bias, LayerNorm and embedding
  // gradients) round to bf16 as they store, so only the matrix products' need finish_grad.
  bool fused_rounding() const;
  // engine_.acquire(unit), then engine_.prefetch of the unit this pass acquires next.
  Task<> acquire(int unit);
  int param_of(int unit, ParamRole role) const;
  // An activation tensor: n elements of the activation dtype at element `offset`.
  TensorRef act(BufferId b, int64_t offset, int64_t n) const { return TensorRef{b, offset, n, o_.act}; }
  int64_t act_bytes(int64_t n) const { return n * dtype_bytes(o_.act); }
  // A block's activation buffer: two f32 rows of statistics, then `widths` activation
  // tensors of N x width elements each.
  struct Carved {
    TensorRef mean, rstd;
    std::vector<TensorRef> t;
  };
  Carved carve(BufferId b, std::initializer_list<int64_t> widths) const;
  int64_t carved_bytes(std::initializer_list<int64_t> widths) const;

  Runtime& rt_;
  const ModelLayout& model_;
  Engine& engine_;
  Streams s_;
  int next_unit_ = -1;  // the unit this pass acquires after the current one; -1: none
  ExecOptions o_;
  int embedding_param_ = 0;
  std::map<std::pair<int, int>, StageActs> stages_;
  std::map<int, BufferId> tied_pending_;  // per microbatch: the output use's gradient (pp = 1)
};

}  // namespace shardcheck::core
