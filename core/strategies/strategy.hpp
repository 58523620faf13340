// The sharding strategies and the placement table that defines them (docs/semantics.md §3):
// where the model weight (P), the accumulating gradient (G) and the main weight (O) live on
// each mesh axis. A new strategy starts here: its name, its row of the table, and whether it
// shards on two data-parallel axes.
//   Strategy s = *parse_strategy("optim");           // ZeRO-1
//   StrategyPlacements p = placements_for(s);        // P [R], G [Partial(avg)], O [Flat]
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/layout/placement.hpp"

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

}  // namespace shardcheck::core
