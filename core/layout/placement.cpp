// Placement names, parsing and the Flat-suffix rule.
#include "core/layout/placement.hpp"

namespace shardcheck::core {

Expected<Placement> Placement::parse(std::string_view text) {
  if (text == "Replicate") return replicate();
  if (text == "Flat") return flat();
  if (text == "Partial(sum)") return partial(ReduceOp::sum);
  if (text == "Partial(avg)") return partial(ReduceOp::avg);
  return fail("unknown placement '", std::string(text),
              "' (expected Replicate, Partial(sum), Partial(avg) or Flat)");
}

std::string Placement::to_string() const {
  switch (kind_) {
    case Kind::replicate:
      return "Replicate";
    case Kind::flat:
      return "Flat";
    case Kind::partial:
      return "Partial(" + std::string(core::to_string(op_)) + ")";
  }
  return "?";
}

Status validate_placements(std::span<const Placement> placements) {
  if (placements.empty()) return fail("a buffer needs one placement per mesh axis; got none");
  bool seen_flat = false;
  for (size_t i = 0; i < placements.size(); ++i) {
    if (placements[i].is_flat()) {
      seen_flat = true;
    } else if (seen_flat) {
      return fail("placements ", to_string(placements), " are invalid: axis ", i, " is ",
                  placements[i].to_string(), " after a Flat axis, but Flat axes must form a suffix");
    }
  }
  return {};
}

std::string to_string(std::span<const Placement> placements) {
  std::string s = "[";
  for (size_t i = 0; i < placements.size(); ++i) {
    if (i) s += ", ";
    s += placements[i].to_string();
  }
  return s + "]";
}

}  // namespace shardcheck::core
