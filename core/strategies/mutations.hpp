// The seed-bug catalog (docs/semantics.md §4): each upstream bug as a named mutation that
// strategy code can be switched into, with where it came from and what goes wrong.
//   Mutations m;  m.add(*parse_mutation("zero1_missing_no_sync"));
//   if (m.has(Mutation::zero1_missing_no_sync)) ...
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace shardcheck::core {

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

}  // namespace shardcheck::core
