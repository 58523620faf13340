// Parameter-group partitioning.
#include "core/strategies/param_groups.hpp"

#include <algorithm>
#include <set>

namespace shardcheck::core {

std::vector<std::vector<int>> partition_parameters(std::span<const ParamKey> params) {
  std::vector<std::pair<std::pair<DType, bool>, std::vector<int>>> groups;
  std::set<int> seen;  // only to skip duplicates; never iterated
  for (const ParamKey& p : params) {
    if (!seen.insert(p.id).second) continue;
    const auto key = std::pair{p.dtype, p.requires_grad};
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, {}});
      it = groups.end() - 1;
    }
    it->second.push_back(p.id);
  }
  std::vector<std::vector<int>> out;
  for (auto& g : groups) out.push_back(std::move(g.second));
  return out;
}

}  // namespace shardcheck::core
