// Mutation names, their upstream references and one-line summaries, and where each applies.
#include "core/strategies/mutations.hpp"

#include "core/layout/mesh.hpp"
#include "core/strategies/training_config.hpp"

namespace shardcheck::core {

namespace {

// One row per mutation, in the enum's order (tests/core/mutations_test.cpp holds it): its name,
// the upstream reference, what goes wrong, and where it changes anything.
struct MutationRow {
  Mutation mutation;
  std::string_view name;
  const char* upstream;
  const char* summary;
  MutationNeeds needs;
};

using S = Strategy;
using R = MutationNeeds::Ranks;
using M = Mutation;
const std::vector<Strategy> kFsdp{S::no_shard,           S::optim, S::optim_grads,
                                  S::optim_grads_params, S::hsdp,  S::hfsdp};
const std::vector<Strategy> kFsdpDistOpt{S::no_shard, S::optim, S::optim_grads, S::optim_grads_params,
                                         S::hsdp,     S::hfsdp, S::distopt};
const std::vector<Strategy> kMainSharded{S::optim, S::optim_grads, S::optim_grads_params, S::hsdp, S::hfsdp};
// Read through mutation_table(), never during static initialization.
const std::vector<MutationRow> kMutationTable = {
    {M::main_grad_alloc_default_stream,
     "main_grad_alloc_default_stream",
     "#6187",
     "accumulator allocated on the compute stream, read by the RS collective, freed, reused by compute",
     {.strategies = {S::optim, S::hfsdp},
      .vpp_min = 2,
      .why = "the race needs an accumulator that a reduce-scatter reads on the RS stream and the host then "
             "frees (the finalization of optim and hfsdp), and a compute-stream allocation before compute "
             "next waits for that reduction (an interleaved pipeline's receive); elsewhere only the "
             "accumulator's pool changes"}},
    {M::post_step_sync_set_order,
     "post_step_sync_set_order",
     "#6336",
     "per-group post-step all-gathers issued in per-rank hash order",
     {.strategies = {S::optim, S::optim_grads, S::hfsdp},
      .ranks = R::weights_gathered,
      .why = "only there are the main weights all-gathered into the model weights after the step, the "
             "collectives whose order the bug makes differ per rank"}},
    {M::stale_model_weight_after_step,
     "stale_model_weight_after_step",
     "#6336",
     "compute weights not refreshed after the optimizer step",
     {.strategies = {S::optim, S::optim_grads, S::hfsdp},
      .strategies_bf16 = {S::no_shard, S::optim_grads_params, S::hsdp},
      .why = "elsewhere the model weights the compute reads are the main weights' own buffer, so no copy is "
             "left stale"}},
    {M::tied_grad_norm_double_count,
     "tied_grad_norm_double_count",
     "#7227",
     "shared copy of the tied embedding counted in the gradient norm",
     {.strategies = kFsdpDistOpt,
      .pp_min = 2,
      .tied_embeddings = true,
      .why = "only a last pipeline stage holds the shared copy of a tied embedding that the norm could count "
             "twice"}},
    {M::pp_embedding_allreduce_raw_shards,
     "pp_embedding_allreduce_raw_shards",
     "#6500",
     "embedding-group all-reduce of local shards with different layouts",
     {.strategies = kMainSharded,
      .pp_min = 2,
      .tied_embeddings = true,
      .ranks = R::main_sharded,
      .why = "the embedding-group all-reduce exists only between pipeline stages sharing a tied embedding, "
             "and a rank's raw shard differs from the tensor's logical rows only when the gradient is "
             "sharded"}},
    {M::vpp_separate_contexts,
     "vpp_separate_contexts",
     "#6486",
     "one FSDP context per virtual pipeline chunk: separate streams and microbatch state",
     {.strategies = kFsdp,
      .vpp_min = 2,
      .why = "the contexts are per virtual pipeline chunk, and DistOpt has no FSDP contexts"}},
    {M::zero1_missing_no_sync,
     "zero1_missing_no_sync",
     "code reading",
     "ZeRO-1 run without is_last=false: earlier microbatches dropped",
     {.strategies = {S::no_shard, S::optim, S::hsdp, S::hfsdp},
      .microbatches_min = 2,
      .why = "with one microbatch every backward is the last; optim_grads and optim_grads_params accumulate "
             "in their final placement and DistOpt ignores is_last, so a missing no_sync changes nothing "
             "there"}},
    {M::grad_divisor_on_running_sum,
     "grad_divisor_on_running_sum",
     "#5956",
     "gradient divisor applied to the accumulated sum, compounding",
     {.strategies = kFsdp,
      .microbatches_min = 2,
      .divisor_other_than_one = true,
      .why = "with one contribution per step, or a divisor of 1, dividing the running sum is dividing the "
             "contribution, and DistOpt scales once per step"}},
    {M::no_initial_broadcast,
     "no_initial_broadcast",
     "code reading",
     "ranks start from different parameters",
     {.strategies = kFsdpDistOpt, .why = "every strategy initializes its weights"}},
    {M::prefetch_missing_wait,
     "prefetch_missing_wait",
     "code reading",
     "prefetched all-gather never awaited: compute reads weights the AG stream may still write",
     {.strategies = kMainSharded,
      .overlap = true,
      .ranks = R::main_sharded,
      .why = "only an overlapped run prefetches, and only where the weights the compute reads are gathered "
             "from shards on the AG stream"}},
};

const std::vector<MutationRow>& mutation_table() { return kMutationTable; }

const MutationRow& row(Mutation m) { return mutation_table()[static_cast<size_t>(m)]; }

}  // namespace

std::string_view to_string(Mutation m) { return row(m).name; }

std::optional<Mutation> parse_mutation(std::string_view s) {
  for (const MutationRow& r : mutation_table()) {
    if (r.name == s) return r.mutation;
  }
  return std::nullopt;
}

const char* mutation_upstream(Mutation m) { return row(m).upstream; }

const char* mutation_summary(Mutation m) { return row(m).summary; }

MutationNeeds mutation_needs(Mutation m) { return row(m).needs; }

bool mutation_table_in_order() {
  const auto& t = mutation_table();
  if (t.size() != static_cast<size_t>(kMutations)) return false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (static_cast<size_t>(t[i].mutation) != i) return false;
  }
  return true;
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
