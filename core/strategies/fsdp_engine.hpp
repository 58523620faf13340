// Megatron-FSDP v2's parameter groups for all six sharding strategies (docs/semantics.md §3):
// main_weight (O), model_weight (O after a step, P once unsharded), main_grad (G while
// accumulating, O after finalization), a per-backward staging buffer (all Partial(avg)),
// the AG/RS stream protocol, the accumulation state machine (reset, reduce, accumulate,
// finalize; the first microbatch inferred from placements), post-step weight sync in
// optimizer order, the gradient norm over unique logical elements, and the embedding-group
// reduction for pipelines. Each catalog bug of docs/semantics.md §4 is a named toggle
// (TrainingConfig::mutations) at the place the upstream code went wrong.
#pragma once

#include <map>
#include <optional>

#include "core/layout/dbuffer.hpp"
#include "core/strategies/engine_env.hpp"
#include "core/strategies/optimizer_step.hpp"

namespace shardcheck::core {

class FsdpEngine final : public Engine {
 public:
  explicit FsdpEngine(EngineEnv env);

  Task<> setup() override;
  Task<> begin_step(int step) override;
  Task<> acquire(int unit) override;
  Task<> release(int unit) override;
  Task<> prefetch(int unit) override;
  TensorRef weight(int param) override;
  Task<> begin_backward(int unit) override;
  TensorRef grad(int param) override;
  Task<> end_backward(int unit) override;
  void set_last_microbatch(bool last) override { ctx_.front().last = last; }
  Task<> finish_backward() override;
  Task<> step(int step) override;
  TensorRef norm_value() override { return TensorRef{norm_, 0, 1, DType::f64}; }
  RankView view() const override;
  const NormPlan& norm_plan() const override { return plan_; }

  // For checks of the norm on a gradient of one's choosing: installs finalized gradients
  // (placement O) from full logical values (indexed by logical parameter), then computes the
  // norm as a step would; norm_value() holds it afterwards.
  Task<> load_gradients(const std::vector<std::vector<float>>& logical);
  Task<> compute_norm();

 private:
  // One context holds the streams and microbatch state; virtual pipeline chunks share it
  // (unless the vpp_separate_contexts mutation gives each chunk its own).
  struct Ctx {
    StreamId ag = -1, rs = -1;
    bool last = true;      // outside no_sync every backward is the last (FSDP2's default)
    EventId reduced = -1;  // the last gradient reduction on rs
    bool has_reduced = false;
    // With overlap: the staging buffer (on compute's pool) the last reduction reads, kept
    // until compute has waited for that reduction one unit later.
    std::optional<DBuffer> pending;
  };
  struct Group {
    int unit = 0;
    int ctx = 0;
    std::string name;
    std::shared_ptr<const GlobalLayout> layout;
    std::vector<int> params;  // model parameter ids, in layout order
    DBuffer main, model, grad, adam_m, adam_v;
    std::optional<DBuffer> model_shard;  // O-placed model weights in param dtype
    std::optional<DBuffer> full;         // all-Replicate weights while acquired
    std::optional<DBuffer> staging;
    bool has_grad = false;
    bool first = true;       // the next accumulation overwrites
    bool drop_grad = false;  // optimizer consumed it; drop at the next step's start
    int refs = 0;
    bool prefetched = false;  // gathered ahead on AG (overlap); the next acquire waits for it
    EventId event = -1;
  };

  Runtime& rt() { return *env_.rt; }
  bool mutated(Mutation m) const { return env_.config->mutations.has(m); }
  Group& group_of_unit(int unit) { return groups_.at(group_index_.at(unit)); }
  std::pair<Group*, int> slot(int param);  // group and tensor index
  DBuffer shaped(const Group& g, Placements p, DType t) const;
  Task<DBuffer> allocate(Group& g, Placements p, DType t, StreamId s, const std::string& what);
  std::shared_ptr<const LogicalMap> map_for(const Group& g, const DBuffer& d) const;
  // Redistributes axis by axis to `to`; frees intermediates, and the source when asked.
  Task<DBuffer> convert(Group& g, DBuffer src, const Placements& to, StreamId s, const std::string& tag,
                        bool free_src);
  Task<> initialize(Group& g);
  Task<> gather(Group& g);        // the unit's weights to all-Replicate on AG, event recorded
  Task<> retire_pending(Ctx& c);  // compute waits the pending reduction, frees its input
  Task<> reset_grad(Group& g, Ctx& c);
  Task<> accumulate(Group& g, Ctx& c);
  Task<> embedding_allreduce();
  // The shared optimizer step's inputs: the norm's terms (recorded in plan_ as well) and the
  // pieces to update.
  GradNorm norm_spec();
  ParamUpdate update_spec(int step) const;
  Task<> post_step_sync();
  std::optional<TensorRef> grad_rows(const Group& g, int t) const;
  bool first_replica(const DBuffer& d) const;

  EngineEnv env_;
  StrategyPlacements pl_;
  std::vector<Ctx> ctx_;
  std::vector<Group> groups_;
  std::map<int, int> group_index_;  // unit -> index in groups_
  std::vector<GroupId> dp_groups_;  // one per dp axis
  GroupId dp_all_ = -1, world_ = -1, embedding_ = -1;
  BufferId coef_ = -1, norm_ = -1;
  NormPlan plan_;
  std::shared_ptr<const std::vector<std::string>> names_;  // logical parameter names, shared by annotations
};

}  // namespace shardcheck::core
