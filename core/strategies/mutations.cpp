// Mutation names, their upstream references and one-line summaries, and where each applies.
#include "core/strategies/mutations.hpp"

#include "core/layout/mesh.hpp"
#include "core/strategies/training_config.hpp"

namespace shardcheck::core {

namespace {
constexpr std::string_view kMutationNames[kMutations] = {
    "main_grad_alloc_default_stream", "post_step_sync_set_order",          "stale_model_weight_after_step",
    "tied_grad_norm_double_count",    "pp_embedding_allreduce_raw_shards", "vpp_separate_contexts",
    "zero1_missing_no_sync",          "grad_divisor_on_running_sum",       "no_initial_broadcast",
    "prefetch_missing_wait",
};
constexpr const char* kUpstream[kMutations] = {"#6187",        "#6336",       "#6336",        "#7227",
                                               "#6500",        "#6486",       "code reading", "#5956",
                                               "code reading", "code reading"};
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
      "prefetched all-gather never awaited: compute reads weights the AG stream may still write",
  };
  return kSummary[static_cast<int>(m)];
}

MutationNeeds mutation_needs(Mutation m) {
  using S = Strategy;
  using R = MutationNeeds::Ranks;
  const std::vector<Strategy> fsdp{S::no_shard,           S::optim, S::optim_grads,
                                   S::optim_grads_params, S::hsdp,  S::hfsdp};
  MutationNeeds n;
  switch (m) {
    case Mutation::main_grad_alloc_default_stream:
      n.strategies = {S::optim, S::hfsdp};
      n.vpp_min = 2;
      n.why =
          "the race needs an accumulator that a reduce-scatter reads on the RS stream and the host then "
          "frees "
          "(the finalization of optim and hfsdp), and a compute-stream allocation before compute next waits "
          "for "
          "that reduction (an interleaved pipeline's receive); elsewhere only the accumulator's pool changes";
      break;
    case Mutation::post_step_sync_set_order:
      n.strategies = {S::optim, S::optim_grads, S::hfsdp};
      n.ranks = R::weights_gathered;
      n.why =
          "only there are the main weights all-gathered into the model weights after the step, the "
          "collectives "
          "whose order the bug makes differ per rank";
      break;
    case Mutation::stale_model_weight_after_step:
      n.strategies = {S::optim, S::optim_grads, S::hfsdp};
      n.strategies_bf16 = {S::no_shard, S::optim_grads_params, S::hsdp};
      n.why =
          "elsewhere the model weights the compute reads are the main weights' own buffer, so no copy is "
          "left stale";
      break;
    case Mutation::tied_grad_norm_double_count:
      n.strategies = fsdp;
      n.strategies.push_back(S::distopt);
      n.pp_min = 2;
      n.tied_embeddings = true;
      n.why =
          "only a last pipeline stage holds the shared copy of a tied embedding that the norm could count "
          "twice";
      break;
    case Mutation::pp_embedding_allreduce_raw_shards:
      n.strategies = {S::optim, S::optim_grads, S::optim_grads_params, S::hsdp, S::hfsdp};
      n.pp_min = 2;
      n.tied_embeddings = true;
      n.ranks = R::main_sharded;
      n.why =
          "the embedding-group all-reduce exists only between pipeline stages sharing a tied embedding, and "
          "a "
          "rank's raw shard differs from the tensor's logical rows only when the gradient is sharded";
      break;
    case Mutation::vpp_separate_contexts:
      n.strategies = fsdp;
      n.vpp_min = 2;
      n.why = "the contexts are per virtual pipeline chunk, and DistOpt has no FSDP contexts";
      break;
    case Mutation::zero1_missing_no_sync:
      n.strategies = {S::no_shard, S::optim, S::hsdp, S::hfsdp};
      n.microbatches_min = 2;
      n.why =
          "with one microbatch every backward is the last; optim_grads and optim_grads_params accumulate in "
          "their final placement and DistOpt ignores is_last, so a missing no_sync changes nothing there";
      break;
    case Mutation::grad_divisor_on_running_sum:
      n.strategies = fsdp;
      n.microbatches_min = 2;
      n.divisor_other_than_one = true;
      n.why =
          "with one contribution per step, or a divisor of 1, dividing the running sum is dividing the "
          "contribution, and DistOpt scales once per step";
      break;
    case Mutation::no_initial_broadcast:
      n.strategies = fsdp;
      n.strategies.push_back(S::distopt);
      n.why = "every strategy initializes its weights";
      break;
    case Mutation::prefetch_missing_wait:
      n.strategies = {S::optim, S::optim_grads, S::optim_grads_params, S::hsdp, S::hfsdp};
      n.ranks = R::main_sharded;
      n.overlap = true;
      n.why =
          "only an overlapped run prefetches, and only where the weights the compute reads are gathered "
          "from shards on the AG stream";
      break;
  }
  return n;
}

namespace {

std::string strategy_list(const std::vector<Strategy>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + std::string(to_string(v[i]));
  }
  return s;
}

bool contains(const std::vector<Strategy>& v, Strategy s) {
  for (Strategy x : v) {
    if (x == s) return true;
  }
  return false;
}

// The data-parallel axes the strategy's placements refer to, in placement order, that `ranks`
// counts: where the main weights are Flat, and (weights_gathered) the model weights are not.
std::vector<Axis> counted_axes(MutationNeeds::Ranks ranks, Strategy s, const Mesh& mesh) {
  const StrategyPlacements pl = placements_for(s);
  const std::vector<std::string> names = is_two_dimensional(s)
                                             ? std::vector<std::string>{"dp_outer", "dp_inner"}
                                             : std::vector<std::string>{"dp"};
  std::vector<Axis> out;
  for (size_t i = 0; i < names.size(); ++i) {
    const bool gathered = pl.main[i].is_flat() && pl.model[i].is_replicate();
    if (ranks == MutationNeeds::Ranks::main_sharded ? pl.main[i].is_flat() : gathered) {
      out.push_back({names[i], mesh.size_or_one(names[i])});
    }
  }
  return out;
}

// The need on data-parallel ranks, as "needs ... (where: has)", or "" when met.
std::string unmet_ranks(const MutationNeeds& n, Strategy s, const Mesh& mesh, std::string_view where) {
  if (n.ranks == MutationNeeds::Ranks::any || s == Strategy::distopt) return "";
  const std::vector<Axis> axes = counted_axes(n.ranks, s, mesh);
  int ranks = 1;
  std::string names, sizes;
  for (size_t i = 0; i < axes.size(); ++i) {
    ranks *= axes[i].size;
    names += (i ? " x " : "") + axes[i].name;
    sizes += (i ? " x " : "") + std::to_string(axes[i].size);
  }
  if (ranks >= 2) return "";
  const char* what = n.ranks == MutationNeeds::Ranks::main_sharded
                         ? "shards the main weights"
                         : "gathers the main weights into the model weights";
  return "needs at least 2 ranks on " + names + ", where " + std::string(to_string(s)) + " " + what + " (" +
         std::string(where) + ": " + names + " " + sizes + ")";
}

// The first unmet need, as "needs ... (where: has)", or "" when every need is met.
std::string unmet(const MutationNeeds& n, const TrainingConfig& c, const Mesh& mesh, std::string_view where) {
  const std::string in = " (" + std::string(where) + ": ";
  const Strategy s = c.strategy;
  const bool bf16 = c.precision.param == DType::bf16;
  if (!contains(n.strategies, s) && !(bf16 && contains(n.strategies_bf16, s))) {
    std::string need = "needs strategy " + strategy_list(n.strategies);
    if (n.strategies_bf16.empty()) return need + in + std::string(to_string(s)) + ")";
    need += ", or bf16 model weights (precision.param: bf16) with " + strategy_list(n.strategies_bf16);
    if (!contains(n.strategies_bf16, s)) return need + in + std::string(to_string(s)) + ")";
    return need + in + std::string(to_string(s)) + " with fp32 model weights)";
  }
  const int pp = mesh.size_or_one("pp"), vpp = mesh.virtual_stages();
  if (pp < n.pp_min) return "needs pp >= " + std::to_string(n.pp_min) + in + "pp " + std::to_string(pp) + ")";
  if (vpp < n.vpp_min)
    return "needs vpp >= " + std::to_string(n.vpp_min) + in + "vpp " + std::to_string(vpp) + ")";
  if (n.tied_embeddings && !c.model.tied) return "needs model.tied_embeddings: true" + in + "false)";
  if (std::string r = unmet_ranks(n, s, mesh, where); !r.empty()) return r;
  if (c.microbatches < n.microbatches_min) {
    return "needs microbatches >= " + std::to_string(n.microbatches_min) + in + "microbatches " +
           std::to_string(c.microbatches) + ")";
  }
  if (n.divisor_other_than_one && c.divisor() == 1)
    return "needs a gradient divisor other than 1" + in + "gradient_divisor 1)";
  if (n.overlap && !c.overlap) return "needs streams.overlap: true" + in + "false)";
  return "";
}

}  // namespace

Status mutation_unmet_need(Mutation m, const TrainingConfig& c, const Mesh& mesh, std::string_view where) {
  const MutationNeeds n = mutation_needs(m);
  const std::string need = unmet(n, c, mesh, where);
  if (need.empty()) return {};
  return fail("mutation '" + std::string(to_string(m)) + "' " + need + ": " + n.why);
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
