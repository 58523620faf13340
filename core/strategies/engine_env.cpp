// EngineEnv helpers.
#include "core/strategies/engine_env.hpp"

namespace shardcheck::core {

int EngineEnv::pp_rank() const {
  auto a = mesh->find_axis("pp");
  return a ? mesh->coords(rank)[*a] : 0;
}

std::vector<int> EngineEnv::dp_axes() const {
  std::vector<int> axes;
  for (const char* name : {"dp", "dp_outer", "dp_inner"}) {
    if (auto a = mesh->find_axis(name)) axes.push_back(*a);
  }
  return axes;
}

int EngineEnv::dp_size() const {
  int d = 1;
  for (int a : dp_axes()) d *= mesh->size(a);
  return d;
}

int EngineEnv::dp_rank() const {
  const auto c = mesh->coords(rank);
  int r = 0;
  for (int a : dp_axes()) r = r * mesh->size(a) + c[a];
  return r;
}

std::vector<int> units_of_rank(const ModelLayout& model, int pp_rank) {
  std::vector<int> u;
  for (size_t i = 0; i < model.units().size(); ++i) {
    if (model.stage_rank(model.units()[i].vstage) == pp_rank) u.push_back(static_cast<int>(i));
  }
  return u;
}

}  // namespace shardcheck::core
