// The property table: names, why each must hold, and the cases each draws from.
#include "properties/properties.hpp"

#include "properties/checks.hpp"

namespace shardcheck::properties {

namespace {

Property layout(std::string name, std::string why, Verdict (*check)(const LayoutCase&)) {
  Property p;
  p.name = std::move(name);
  p.why = std::move(why);
  p.check_layout = check;
  return p;
}

Property training(std::string name, std::string why, Verdict (*check)(const TrainingCase&), CaseSpace space) {
  Property p;
  p.name = std::move(name);
  p.why = std::move(why);
  p.check_training = check;
  p.space = std::move(space);
  return p;
}

std::vector<Property> make() {
  CaseSpace exact;
  exact.exact_only = true;
  CaseSpace exact_fsdp = exact;
  exact_fsdp.with_distopt = false;
  CaseSpace any;
  CaseSpace explored;
  explored.policies = {sim::Policy::random, sim::Policy::pct};
  return {
      layout("layout_partitions",
             "Ranks must own whole rows and, under Flat, each logical element exactly once (tensors never "
             "overlap; gaps and "
             "padding hold nothing), or a reduce-scatter or an optimizer shard mixes, drops or double-counts "
             "parameter elements.",
             check_layout_partitions),
      layout("redistribute_round_trip",
             "Redistribute changes where values live, never what they are: slice then gather, or relabel as "
             "an average then "
             "reduce, gives back the input, and reduce-scatter then all-gather equals all-reduce, without "
             "reading a gap.",
             check_redistribute_round_trip),
      training(
          "matches_reference",
          "In exact mode every sum and division is exact in any order, so every strategy (DistOpt included) "
          "must "
          "reproduce the single-rank reference's weights bit for bit; any difference is a bug, not rounding.",
          check_matches_reference, exact),
      training("matches_distopt",
               "DistOpt is the baseline users compare against, and in exact mode both reduce the same "
               "grid-rounded "
               "gradients, so every Megatron-FSDP strategy must end every step with DistOpt's weights bit "
               "for bit.",
               check_matches_distopt, exact_fsdp),
      training("collective_fingerprints",
               "NCCL pairs the k-th collective of a communicator across its members blindly, so every member "
               "of a group "
               "must issue the same sequence (op, dtype, counts, reduction, root, tensor) or real hardware "
               "hangs or corrupts.",
               check_collective_fingerprints, any),
      training("no_findings",
               "An unmutated strategy has no race, order mismatch, deadlock, uninitialized read, miscount or "
               "divergence in "
               "any schedule, so the detectors and oracles must stay silent under random and PCT schedules.",
               check_no_findings, explored),
      training("resting_memory",
               "Sharding exists to save memory: at rest a rank must hold exactly the strategy's shards of "
               "main weights, Adam "
               "state, gradients and model weights; more is a leak or a kept unsharded copy, less is dropped "
               "state.",
               check_resting_memory, any),
      training("grad_norm",
               "Clipping scales by the gradient norm, which must count each logical element once (replicas "
               "and the tied "
               "output copy not again), so every rank must report the norm of the logical gradient the ranks "
               "hold.",
               check_grad_norm, any),
      training(
          "same_seed_same_trace",
          "Every finding is replayed from its seed, which only works if the same case and seed give the same "
          "schedule, trace digest, findings and values on every run.",
          check_same_seed_same_trace, any),
  };
}

}  // namespace

const std::vector<Property>& all_properties() {
  static const std::vector<Property> table = make();
  return table;
}

const Property* find_property(const std::string& name) {
  for (const Property& p : all_properties()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace shardcheck::properties
