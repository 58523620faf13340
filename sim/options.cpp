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

}  // namespace shardcheck::sim
