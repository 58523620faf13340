// Strategy names and the placement table.
#include "core/strategies/strategy.hpp"

#include "core/base/status.hpp"

namespace shardcheck::core {

namespace {
constexpr std::string_view kStrategies[] = {"no_shard", "optim", "optim_grads", "optim_grads_params",
                                            "hsdp",     "hfsdp", "distopt"};
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
    case Strategy::no_shard:
      return {{R}, {P}, {R}};
    case Strategy::optim:
      return {{R}, {P}, {F}};
    case Strategy::optim_grads:
      return {{R}, {F}, {F}};
    case Strategy::optim_grads_params:
      return {{F}, {F}, {F}};
    case Strategy::hsdp:
      return {{R, F}, {P, F}, {R, F}};
    case Strategy::hfsdp:
      return {{R, F}, {P, F}, {F, F}};
    case Strategy::distopt:
      break;
  }
  throw InternalError("distopt has no FSDP placements");
}

}  // namespace shardcheck::core
