// Names of the simulator's policies and models.
#include "sim/options.hpp"

namespace shardcheck::sim {

std::string_view to_string(Policy p) {
  switch (p) {
    case Policy::in_order:
      return "in_order";
    case Policy::random:
      return "random";
    case Policy::pct:
      return "pct";
    case Policy::delay_comm:
      return "delay_comm";
  }
  return "?";
}

std::optional<Policy> parse_policy(std::string_view s) {
  for (Policy p : {Policy::in_order, Policy::random, Policy::pct, Policy::delay_comm}) {
    if (to_string(p) == s) return p;
  }
  return std::nullopt;
}

std::string_view to_string(AllocatorModel m) {
  return m == AllocatorModel::caching ? "caching" : "stream_ordered";
}

std::optional<AllocatorModel> parse_allocator(std::string_view s) {
  if (s == "caching") return AllocatorModel::caching;
  if (s == "stream_ordered") return AllocatorModel::stream_ordered;
  return std::nullopt;
}

std::optional<Reuse> parse_reuse(std::string_view s) {
  if (s == "best_fit") return Reuse::best_fit;
  if (s == "earliest") return Reuse::earliest;
  return std::nullopt;
}

}  // namespace shardcheck::sim
