// Everything a training run is configured by: the sharding strategy and its placements
// (DESIGN.md §3 table), precision, optimizer, and the seeded mutations of the seed-bug
// catalog (DESIGN.md §4) that strategy code can be switched into.
//   Strategy s = *parse_strategy("optim");           // ZeRO-1
//   StrategyPlacements p = placements_for(s);        // P [R], G [Partial(avg)], O [Flat]
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/model.hpp"
#include "core/placement.hpp"

namespace shardcheck::core {

enum class Strategy : uint8_t { no_shard, optim, optim_grads, optim_grads_params, hsdp, hfsdp, distopt };
std::string_view to_string(Strategy s);
std::optional<Strategy> parse_strategy(std::string_view s);
bool is_two_dimensional(Strategy s);  // hsdp, hfsdp: (dp_outer, dp_inner)

struct StrategyPlacements {
  Placements model;  // P: model weight once unsharded for compute
  Placements grad;   // G: main_grad while accumulating
  Placements main;   // O: main weight, and main_grad after finalization
};
StrategyPlacements placements_for(Strategy s);  // not for distopt

struct Precision {
  DType param = DType::bf16;  // model weights
  DType main = DType::f32;    // main weights and optimizer state
  DType grad = DType::f32;    // main_grad and reductions
  bool exact = false;         // grid-rounded contributions: every strategy bitwise = reference
};

// The dtype of activations and their gradients: bf16 in mixed precision (bf16 model weights,
// not exact), so the matrix products run bf16 x bf16 with fp32 accumulation; fp32 otherwise.
inline DType activation_dtype(const Precision& p) { return p.param == DType::bf16 && !p.exact ? DType::bf16 : DType::f32; }

struct OptimizerConfig {
  enum class Kind : uint8_t { adam, sgd } kind = Kind::adam;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double clip_grad = 1.0;  // 0: no clipping
};

enum class Mutation : uint8_t {
  main_grad_alloc_default_stream,
  post_step_sync_set_order,
  stale_model_weight_after_step,
  tied_grad_norm_double_count,
  pp_embedding_allreduce_raw_shards,
  vpp_separate_contexts,
  zero1_missing_no_sync,
  grad_divisor_on_running_sum,
  no_initial_broadcast,
};
inline constexpr int kMutations = 9;
std::string_view to_string(Mutation m);
std::optional<Mutation> parse_mutation(std::string_view s);
const char* mutation_upstream(Mutation m);  // "#6187", "code reading", ...
const char* mutation_summary(Mutation m);   // what goes wrong, one line

class Mutations {
 public:
  void add(Mutation m) { on_[static_cast<int>(m)] = true; }
  bool has(Mutation m) const { return on_[static_cast<int>(m)]; }
  bool any() const;
  std::vector<Mutation> list() const;

 private:
  std::array<bool, kMutations> on_{};
};

// Exact mode's grid (DESIGN.md §3): each contribution is rounded to q = dp*mb*2^-k and
// clamped to `limit` grid steps, chosen from the model size so that every sum of up to
// 2*dp*mb contributions is exact in fp32 and every sum of squares of gradients is exact in
// fp64.
struct ExactGrid {
  double q = 0;
  double limit = 0;  // in units of q
  int k = 0;
};
ExactGrid exact_grid(int dp, int microbatches, int64_t logical_elements);

struct TrainingConfig {
  ModelConfig model;
  Strategy strategy = Strategy::no_shard;
  Precision precision;
  OptimizerConfig optimizer;
  int microbatches = 1;
  int micro_batch_size = 1;
  int steps = 1;
  double gradient_divisor = 0;  // 0: the number of microbatches
  bool unified_comm = false;
  uint64_t data_seed = 7;
  Mutations mutations;
  double divisor() const { return gradient_divisor > 0 ? gradient_divisor : microbatches; }
};

}  // namespace shardcheck::core
