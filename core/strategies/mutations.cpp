// Mutation names, their upstream references and one-line summaries.
#include "core/strategies/mutations.hpp"

namespace shardcheck::core {

namespace {
constexpr std::string_view kMutationNames[kMutations] = {
    "main_grad_alloc_default_stream", "post_step_sync_set_order",          "stale_model_weight_after_step",
    "tied_grad_norm_double_count",    "pp_embedding_allreduce_raw_shards", "vpp_separate_contexts",
    "zero1_missing_no_sync",          "grad_divisor_on_running_sum",       "no_initial_broadcast",
};
constexpr const char* kUpstream[kMutations] = {"#6187", "#6336",        "#6336", "#7227",       "#6500",
                                               "#6486", "code reading", "#5956", "code reading"};
}  // namespace

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
      "accumulator allocated on the compute stream, read by the RS collective, freed, reused by compute",
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

}  // namespace shardcheck::core
