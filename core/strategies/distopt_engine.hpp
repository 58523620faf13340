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
  // bucket_elems > 0 closes a bucket once it holds that many elements (Megatron's
  // --ddp-bucket-size); 0 keeps every parameter in one bucket, as Megatron does without
  // overlap_grad_reduce.
  static DistOptLayout create(const ModelLayout& model, const std::vector<int>& units, int dp,
                              int64_t bucket_elems = 0);
  // Megatron's bucket size for a config: with overlap max(40M, 1M x dp) elements unless the
  // config sets one (TrainingConfig::bucket_size), without it one bucket.
  static int64_t bucket_elems(const TrainingConfig& c, int dp);
};

class DistOptEngine final : public Engine {
 public:
  explicit DistOptEngine(EngineEnv env);

  Task<> setup() override;
  Task<> begin_step(int step) override;
  Task<> acquire(int unit) override;
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
  void make_groups();
  void overlap_state();
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
  Task<> reduce_bucket(size_t b);  // comm waits for compute's gradients, scales, reduce-scatters
  // A bucket holding the tied embedding or output weight alone, with a group across stages.
  bool tied_embedding_bucket(size_t b) const;
  Task<> reduce_tied_embedding(size_t b);  // its reduced shard all-reduced over the stages
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
  // With overlap (TrainingConfig::overlap), per bucket: the accumulations landed this step
  // (ready when every parameter has one per microbatch), whether its reduce-scatter was
  // issued, and its parameter all-gather's event and whether compute still has to wait for it.
  std::vector<int> bucket_of_;  // model parameter id -> bucket, -1 if absent
  std::vector<int64_t> landed_;
  std::vector<bool> reduced_, gather_pending_;
  std::vector<EventId> gathered_;
  bool params_stale_ = false;  // overlap: the step's update is not yet gathered (next begin_step)
  NormPlan plan_;
};

}  // namespace shardcheck::core
