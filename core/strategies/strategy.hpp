// The sharding strategies and the placement table that defines them (docs/semantics.md §3):
// where the model weight (P), the accumulating gradient (G) and the main weight (O) live on
// each mesh axis. A strategy is one row of kStrategyTable: its name, what it is also known as,
// and its placements on each data-parallel axis; every consumer (names, parsing, the meshes a
// scenario accepts, the engine, the tests) reads that row.
//   Strategy s = *parse_strategy("optim");           // ZeRO-1
//   StrategyPlacements p = placements_for(s);        // P [R], G [Partial(avg)], O [Flat]
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/layout/placement.hpp"

namespace shardcheck::core {

enum class Strategy : uint8_t { no_shard, optim, optim_grads, optim_grads_params, hsdp, hfsdp, distopt };
inline constexpr int kStrategies = 7;

// P, G and O on one data-parallel mesh axis.
struct AxisPlacements {
  Placement model, grad, main;
};

struct StrategyInfo {
  Strategy strategy;
  std::string_view name;      // as scenario files, reports and the command line spell it
  std::string_view known_as;  // docs/scenarios.md's "also known as"
  // Its placements on each data-parallel mesh axis, outermost first: one ({dp}), two
  // ({dp_outer, dp_inner}: it shards on two axes), or none (distopt, which has no FSDP
  // placements and runs on {dp}).
  std::optional<AxisPlacements> axis[2];
  constexpr int placed_axes() const { return axis[0] ? (axis[1] ? 2 : 1) : 0; }
};

// In Strategy's order: info(s) indexes it.
extern const StrategyInfo kStrategyTable[kStrategies];
const StrategyInfo& info(Strategy s);

std::string_view to_string(Strategy s);
std::optional<Strategy> parse_strategy(std::string_view s);
// Every strategy's name in table order, as a message offers them: "no_shard, ... or distopt".
std::string strategy_names();
bool is_two_dimensional(Strategy s);  // hsdp, hfsdp: (dp_outer, dp_inner)
// The names of the strategies that shard on two axes, as a message offers them.
std::string two_dimensional_strategy_names();

struct StrategyPlacements {
  Placements model;  // P: model weight once unsharded for compute
  Placements grad;   // G: main_grad while accumulating
  Placements main;   // O: main weight, and main_grad after finalization
};
StrategyPlacements placements_for(Strategy s);  // not for distopt

}  // namespace shardcheck::core
