// The bug catalog (docs/semantics.md §4): each upstream bug as a named mutation that
// strategy code can be switched into, with where it came from, what goes wrong, and what a
// run needs for the mutation to change anything.
//   Mutations m;  m.add(*parse_mutation("zero1_missing_no_sync"));
//   if (m.has(Mutation::zero1_missing_no_sync)) ...
//   std::string e = mutation_unmet_need(Mutation::vpp_separate_contexts, config, mesh);  // "" when it
//   applies
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/strategies/strategy.hpp"

namespace shardcheck::core {

struct TrainingConfig;
class Mesh;

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
  prefetch_missing_wait,
};
inline constexpr int kMutations = 10;
std::string_view to_string(Mutation m);
std::optional<Mutation> parse_mutation(std::string_view s);
const char* mutation_upstream(Mutation m);  // "#6187", "code reading", ...
const char* mutation_summary(Mutation m);   // what goes wrong, one line

// What a run needs for a mutation to change what it does. Outside these, the mutated code is
// never reached, or reaching it changes nothing a detector or oracle reads (at most the
// trace: an allocation from another stream's pool, casts in another order), and the run
// would report "clean" for a bug it never contained. Read off the strategy code and checked
// by running each mutation on every strategy, pipeline shape and precision against the same
// run without it (docs/semantics.md §4).
struct MutationNeeds {
  // Ranks a data-parallel axis set must hold (at least 2) for the mutated operation to have
  // more than one participant: none, the axes the main weights are sharded on, or the axes
  // on which the main weights are gathered into the model weights after the step.
  enum class Ranks : uint8_t { any, main_sharded, weights_gathered };

  std::vector<Strategy> strategies;       // it applies with any of these,
  std::vector<Strategy> strategies_bf16;  // and with these only when the model weights are bf16
  int pp_min = 1;
  int vpp_min = 1;
  int microbatches_min = 1;
  bool tied_embeddings = false;
  bool divisor_other_than_one = false;  // the gradient divisor (microbatches by default)
  bool overlap = false;                 // streams.overlap: true (TrainingConfig::overlap)
  Ranks ranks = Ranks::any;
  const char* why = "";  // one sentence: why it does nothing elsewhere
};
MutationNeeds mutation_needs(Mutation m);
// Whether the table of mutations (mutations.cpp) has one row per Mutation, in its order.
bool mutation_table_in_order();

// "" when `m` changes what training `c` on `mesh` does; otherwise a sentence naming the first
// unmet need and what the run has, `where` saying whose it is:
//   mutation 'post_step_sync_set_order' needs strategy optim, optim_grads or hfsdp (this file: hsdp): ...
Status mutation_unmet_need(Mutation m, const TrainingConfig& c, const Mesh& mesh,
                           std::string_view where = "this file");

class Mutations {
 public:
  void add(Mutation m) { on_[static_cast<int>(m)] = true; }
  bool has(Mutation m) const { return on_[static_cast<int>(m)]; }
  bool any() const;
  std::vector<Mutation> list() const;

 private:
  std::array<bool, kMutations> on_{};
};

}  // namespace shardcheck::core
