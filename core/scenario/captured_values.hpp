// The value checks of a captured program (docs/findings.md, "Values in captures"): from the
// digests its ranks wrote (`value` records, docs/capture-format.md), once per program, not per
// schedule, one finding per code site:
//  - replica_divergence: parameters that were the same on several ranks before an optimizer step
//    and differ on them after it (or by the next step), with the cause the digests show (their
//    gradients differed going into the step, or the step itself did);
//  - missing_reduction: such a divergence where, on some replica, no reduction over all of them
//    made the gradient the step took (none at all, or one over fewer ranks), followed from the
//    reductions' outputs through the operators to the gradient's bytes;
//  - double_reduction: a sum over a group of what a reduction over it made, the same bit for bit
//    on every member: N times the value, as a gradient reduced twice is;
//  - grad_norm_miscount: a small sum over a group (a norm's squares) whose members' terms were
//    computed from the gradient of a parameter they each hold a copy of (the same gradient on
//    each): counted once per copy;
//  - divisor_mismatch: a gradient that is a reduction's output divided by the size of another
//    group of the rank than the one that summed it (the expert-parallel divisor).
//   std::vector<Finding> found = check_captured_values(program);   // empty without value records
#pragma once

#include <vector>

#include "core/check/findings.hpp"
#include "core/scenario/captured_program.hpp"

namespace shardcheck::core {

// The kinds check_captured_values reports, what a capture's run looks for besides the detectors:
// the finding kind table's `from_captured_values` column.
inline bool is_captured_value_kind(FindingKind k) { return info(k).from_captured_values; }

std::vector<Finding> check_captured_values(const CapturedProgram& program);

}  // namespace shardcheck::core
