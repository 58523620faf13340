// The strategy table: names and placements, read by every consumer.
#include "core/strategies/strategy.hpp"

#include <vector>

#include "core/base/status.hpp"
#include "core/base/text.hpp"

namespace shardcheck::core {

namespace {
constexpr Placement R = Placement::replicate(), F = Placement::flat(), P = Placement::partial(ReduceOp::avg);
}  // namespace

const StrategyInfo kStrategyTable[kStrategies] = {
    {Strategy::no_shard, "no_shard", "DDP (ZeRO-0)", {AxisPlacements{R, P, R}}},
    {Strategy::optim, "optim", "ZeRO-1", {AxisPlacements{R, P, F}}},
    {Strategy::optim_grads, "optim_grads", "ZeRO-2", {AxisPlacements{R, F, F}}},
    {Strategy::optim_grads_params, "optim_grads_params", "ZeRO-3, FSDP", {AxisPlacements{F, F, F}}},
    {Strategy::hsdp, "hsdp", "hybrid sharding", {AxisPlacements{R, P, R}, AxisPlacements{F, F, F}}},
    {Strategy::hfsdp, "hfsdp", "hybrid FSDP", {AxisPlacements{R, P, F}, AxisPlacements{F, F, F}}},
    {Strategy::distopt, "distopt", "Megatron's DistributedOptimizer, the baseline", {}},
};

const StrategyInfo& info(Strategy s) { return kStrategyTable[static_cast<int>(s)]; }

std::string_view to_string(Strategy s) { return info(s).name; }

std::optional<Strategy> parse_strategy(std::string_view s) {
  for (const StrategyInfo& row : kStrategyTable) {
    if (row.name == s) return row.strategy;
  }
  return std::nullopt;
}

std::string strategy_names() {
  std::vector<std::string_view> names;
  for (const StrategyInfo& row : kStrategyTable) names.push_back(row.name);
  return one_of(names);
}

bool is_two_dimensional(Strategy s) { return info(s).placed_axes() == 2; }

std::string two_dimensional_strategy_names() {
  std::vector<std::string_view> names;
  for (const StrategyInfo& row : kStrategyTable) {
    if (row.placed_axes() == 2) names.push_back(row.name);
  }
  return one_of(names);
}

StrategyPlacements placements_for(Strategy s) {
  const StrategyInfo& row = info(s);
  if (row.placed_axes() == 0) throw InternalError(std::string(row.name) + " has no FSDP placements");
  StrategyPlacements out;
  for (const auto& axis : row.axis) {
    if (!axis) continue;
    out.model.push_back(axis->model);
    out.grad.push_back(axis->grad);
    out.main.push_back(axis->main);
  }
  return out;
}

}  // namespace shardcheck::core
