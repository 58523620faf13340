// Placements: how one mesh axis holds a distributed buffer. Replicate (every rank has all of
// it), Partial(sum|avg) (every rank has a full-size unreduced contribution) or Flat (the axis
// splits the flattened buffer into equal contiguous pieces). Flat axes must be a suffix.
//   Placements p = {Placement::replicate(), Placement::flat()};   // HSDP's P
//   validate_placements(p).ok()  == true
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/reduce_op.hpp"
#include "core/base/status.hpp"

namespace shardcheck::core {

class Placement {
 public:
  enum class Kind : uint8_t { replicate, partial, flat };

  static constexpr Placement replicate() { return Placement(Kind::replicate, ReduceOp::sum); }
  static constexpr Placement partial(ReduceOp op) { return Placement(Kind::partial, op); }
  static constexpr Placement flat() { return Placement(Kind::flat, ReduceOp::sum); }
  // Parses "Replicate", "Partial(sum)", "Partial(avg)" or "Flat".
  static Expected<Placement> parse(std::string_view text);

  constexpr Kind kind() const { return kind_; }
  constexpr bool is_replicate() const { return kind_ == Kind::replicate; }
  constexpr bool is_partial() const { return kind_ == Kind::partial; }
  constexpr bool is_flat() const { return kind_ == Kind::flat; }
  // Meaningful for Partial only.
  constexpr ReduceOp reduce_op() const { return op_; }

  std::string to_string() const;
  friend constexpr bool operator==(Placement a, Placement b) {
    return a.kind_ == b.kind_ && (a.kind_ != Kind::partial || a.op_ == b.op_);
  }

 private:
  constexpr Placement(Kind k, ReduceOp op) : kind_(k), op_(op) {}
  Kind kind_;
  ReduceOp op_;
};

using Placements = std::vector<Placement>;

// Flat axes must form a suffix of the list: the buffer is flattened once and split along the
// trailing axes, so a Flat axis followed by a non-Flat one has no meaning.
Status validate_placements(std::span<const Placement> placements);
std::string to_string(std::span<const Placement> placements);  // "[Replicate, Flat]"

}  // namespace shardcheck::core
