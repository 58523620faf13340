// Strategy placements, names, mutations and the exact-mode grid.
#include "core/training_config.hpp"

#include <cmath>

namespace shardcheck::core {

namespace {
constexpr std::string_view kStrategies[] = {"no_shard", "optim", "optim_grads", "optim_grads_params",
                                            "hsdp", "hfsdp", "distopt"};
constexpr std::string_view kMutationNames[kMutations] = {
    "main_grad_alloc_default_stream", "post_step_sync_set_order", "stale_model_weight_after_step",
    "tied_grad_norm_double_count", "pp_embedding_allreduce_raw_shards", "vpp_separate_contexts",
    "zero1_missing_no_sync", "grad_divisor_on_running_sum", "no_initial_broadcast",
};
constexpr const char* kUpstream[kMutations] = {"#6187", "#6336", "#6336", "#7227", "#6500",
                                               "#6486", "code reading", "#5956", "code reading"};
}  // namespace

std::string_view to_string(Strategy s) { return kStrategies[static_cast<int>(s)]; }

std::optional<Strategy> parse_strategy(std::string_view s) {
  for (int i = 0; i < 7; ++i) {
    if (kStrategies[i] == s) return static_cast<Strategy>(i);
  }
  return std::nullopt;
}

bool is_two_dimensional(Strategy s) { return s == Strategy::hsdp || s == Strategy::hfsdp; }

StrategyPlacements placements_for(Strategy s) {
  const Placement R = Placement::replicate(), F = Placement::flat(), P = Placement::partial(ReduceOp::avg);
  switch (s) {
    case Strategy::no_shard: return {{R}, {P}, {R}};
    case Strategy::optim: return {{R}, {P}, {F}};
    case Strategy::optim_grads: return {{R}, {F}, {F}};
    case Strategy::optim_grads_params: return {{F}, {F}, {F}};
    case Strategy::hsdp: return {{R, F}, {P, F}, {R, F}};
    case Strategy::hfsdp: return {{R, F}, {P, F}, {F, F}};
    case Strategy::distopt: break;
  }
  throw InternalError("distopt has no FSDP placements");
}

std::string_view to_string(Mutation m) { return kMutationNames[static_cast<int>(m)]; }

std::optional<Mutation> parse_mutation(std::string_view s) {
  for (int i = 0; i < kMutations; ++i) {
    if (kMutationNames[i] == s) return static_cast<Mutation>(i);
  }
  return std::nullopt;
}

const char* mutation_upstream(Mutation m) { return kUpstream[static_cast<int>(m)]; }

const char* mutation_summary(Mutation m) {
  static constexpr const char* kSummary[kMutations] = {
      "accumulator allocated on the compute stream, read by the RS-stream collective, freed, reused by compute",
      "per-group post-step all-gathers issued in per-rank hash order",
      "compute weights not refreshed after the optimizer step",
      "shared copy of the tied embedding counted in the gradient norm",
      "embedding-group all-reduce of local shards with different layouts",
      "one FSDP context per virtual pipeline chunk: separate streams and microbatch state",
      "ZeRO-1 run without is_last=false: earlier microbatches dropped",
      "gradient divisor applied to the accumulated sum, compounding",
      "ranks start from different parameters",
  };
  return kSummary[static_cast<int>(m)];
}

bool Mutations::any() const {
  for (bool b : on_) {
    if (b) return true;
  }
  return false;
}

std::vector<Mutation> Mutations::list() const {
  std::vector<Mutation> v;
  for (int i = 0; i < kMutations; ++i) {
    if (on_[i]) v.push_back(static_cast<Mutation>(i));
  }
  return v;
}

ExactGrid exact_grid(int dp, int microbatches, int64_t logical_elements) {
  // n contributions to one element are summed: dp*mb of them, twice for a tied parameter.
  const double n = 2.0 * dp * microbatches;
  // fp32: (n * limit) * n < 2^24 keeps every partial sum of grid values an integer below
  // 2^24 in units of 2^-k. fp64 norms: elements * (n * limit)^2 < 2^52.
  const double fp32_bound = std::ldexp(1.0, 23) / (n * n);
  const double fp64_bound = std::ldexp(1.0, 26) / (n * std::sqrt(static_cast<double>(logical_elements)));
  const double bound = std::min(fp32_bound, fp64_bound);
  ExactGrid g;
  g.limit = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(std::max(bound, 1.0)))));
  // Contributions larger than 1/16 are clamped; choose the finest q with q * limit >= 1/16.
  const double target = 0.0625 / g.limit;
  g.k = 0;
  while (dp * microbatches * std::ldexp(1.0, -(g.k + 1)) >= target) ++g.k;
  g.q = dp * microbatches * std::ldexp(1.0, -g.k);
  return g;
}

}  // namespace shardcheck::core
