// The contract between the model's forward/backward code and a parameter engine: the six
// Megatron-FSDP strategies, DistOpt, and the single-rank reference each implement it, so
// TinyLM's layers are written once (tinylm_exec.cpp) and the engines differ only in how they
// hold, gather, reduce and update parameters. Also what an engine exposes to observers
// (the oracles), and the observer interface itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/task.hpp"
#include "core/base/tensor_ref.hpp"
#include "core/runtime/runtime.hpp"

namespace shardcheck::core {

// Streams every engine on a rank shares with the model code.
struct Streams {
  StreamId compute = -1;
  StreamId ag = -1;  // all-gather (unshard)
  StreamId rs = -1;  // reduce-scatter (gradient reduction); == ag with a unified comm stream
};

// A piece of a logical parameter held by a rank: `count` logical elements from `first`,
// stored at element `offset` of `buffer`.
struct Piece {
  int logical = 0;
  int64_t first = 0;
  int64_t count = 0;
  BufferId buffer = -1;
  int64_t offset = 0;
  DType dtype = DType::f32;
};

// What a rank holds at the end of a step, for the oracles.
struct RankView {
  std::vector<Piece> main;   // fp32 main weights
  std::vector<Piece> model;  // model weights as compute will read them (param dtype)
  std::vector<Piece> grads;  // finalized gradients (after all reductions of the step)
};

// Which logical elements this rank's gradient norm counted, and how often (1 is right).
struct NormPlan {
  struct Entry {
    int logical = 0;
    int64_t first = 0;
    int64_t count = 0;
  };
  std::vector<Entry> counted;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual Task<> setup() = 0;
  virtual Task<> begin_step(int step) = 0;
  // Makes a unit's weights readable on the compute stream (unshard), reference counted.
  virtual Task<> acquire(int unit) = 0;
  virtual Task<> release(int unit) = 0;  // reshard when the count drops to zero
  // Called right after acquire(current) with the unit the model will acquire next in this
  // pass: with TrainingConfig::overlap an engine starts gathering it now, so the gather runs
  // during the current unit's compute (FSDP2's and Megatron's prefetch). No-op otherwise.
  virtual Task<> prefetch(int) { co_return; }
  virtual TensorRef weight(int param) = 0;  // valid while its unit is acquired
  // Gradient staging for one backward of a unit: grad(param) is where the model writes
  // that parameter's gradient contribution; end_backward reduces and accumulates it.
  virtual Task<> begin_backward(int unit) = 0;
  virtual TensorRef grad(int param) = 0;
  virtual Task<> end_backward(int unit) = 0;
  // The microbatch state of the ambient context: is this backward the step's last?
  virtual void set_last_microbatch(bool last) = 0;
  virtual Task<> finish_backward() = 0;  // compute waits for every gradient reduction
  virtual Task<> step(int step) = 0;     // norm, clip, optimizer, post-step weight sync
  virtual TensorRef norm_value() = 0;    // f64[1]: the step's gradient norm, on device
  virtual RankView view() const = 0;
  virtual const NormPlan& norm_plan() const = 0;
};

// Called by the trainer on each rank. The simulator's observer reads device memory through
// its global view; any observer may download (these are coroutines).
class Observer {
 public:
  virtual ~Observer() = default;
  virtual Task<> on_initialized(Runtime& rt, const RankView& view) = 0;
  virtual Task<> on_step_end(Runtime& rt, int step, const RankView& view, double reported_norm,
                             const NormPlan& plan) = 0;
};

}  // namespace shardcheck::core
