// Megatron's DistributedOptimizer, the baseline (docs/semantics.md §3): parameters in reverse
// registration order in one contiguous buffer, each start aligned to 64 elements, buckets
// padded to lcm(dp, 128) with a shared embedding alone in its bucket; gradients accumulate
// locally over microbatches, are scaled by 1/dp and reduce-scattered (sum) once per step;
// each rank owns an equal contiguous range of every bucket regardless of parameter
// boundaries, keeps fp32 main weights and Adam state for it, steps, casts back, and
// all-gathers the parameters.
#pragma once

#include <map>

#include "core/strategies/engine_env.hpp"
#include "core/strategies/optimizer_step.hpp"

namespace shardcheck::core {

struct DistOptLayout {
  struct Bucket {
    int64_t offset = 0;  // first element in the buffer
    int64_t size = 0;    // a multiple of lcm(dp, 128)
    std::vector<int> params;
  };
  std::vector<int64_t> offset;  // per model parameter id: start in the buffer, -1 if absent
  std::vector<Bucket> buckets;
  int64_t total = 0;
  static DistOptLayout create(const ModelLayout& model, const std::vector<int>& units, int dp);
};

class DistOptEngine final : public Engine {
 public:
  explicit DistOptEngine(EngineEnv env);

  Task<> setup() override;
  Task<> begin_step(int step) override;
  Task<> acquire(int) override { co_return; }
  Task<> release(int) override { co_return; }
  TensorRef weight(int param) override;
  Task<> begin_backward(int unit) override;
  TensorRef grad(int param) override;
  Task<> end_backward(int unit) override;
  void set_last_microbatch(bool) override {}
  Task<> finish_backward() override { co_return; }
  Task<> step(int step) override;
  TensorRef norm_value() override { return TensorRef{norm_, 0, 1, DType::f64}; }
  RankView view() const override;
  const NormPlan& norm_plan() const override { return plan_; }
  const DistOptLayout& layout() const { return layout_; }

 private:
  // The part of a parameter inside this rank's range of a bucket.
  struct Owned {
    int param = 0;
    int bucket = 0;
    int64_t buffer_offset = 0;  // in the param/grad buffers
    int64_t shard_offset = 0;   // in the bucket's main/m/v shards
    int64_t first = 0;          // logical element of the parameter
    int64_t count = 0;
  };
  Runtime& rt() { return *env_.rt; }
  int64_t shard_size(int b) const { return layout_.buckets[b].size / env_.dp_size(); }
  int64_t shard_start(int b) const { return layout_.buckets[b].offset + env_.dp_rank() * shard_size(b); }
  std::shared_ptr<const LogicalMap> buffer_map() const;
  Task<> reduce_gradients();
  // The shared optimizer step's inputs: the norm's terms (recorded in plan_ as well) and the
  // owned ranges to update and cast back.
  GradNorm norm_spec();
  ParamUpdate update_spec(int step) const;
  Task<> gather_params();  // the updated ranges to every data-parallel rank, on comm

  EngineEnv env_;
  DistOptLayout layout_;
  std::vector<Owned> owned_;
  StreamId comm_ = -1;
  GroupId dp_all_ = -1, world_ = -1, embedding_ = -1;
  BufferId params_ = -1, grads_ = -1, coef_ = -1, norm_ = -1;
  std::vector<BufferId> main_, m_, v_;  // per bucket: this rank's shard
  BufferId staging_ = -1;
  std::map<int, int64_t> staging_offset_;  // param -> offset in staging
  EventId params_ready_ = -1, grads_ready_ = -1;
  NormPlan plan_;
};

}  // namespace shardcheck::core
