// What the value checks of a captured program share (captured_values.hpp): the facts the walk of
// value_flow.hpp observed where the digests were taken, and helpers to name ranks, lines and
// numbers in findings. Private to the captured_values*.cpp and values_*.cpp files.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/check/findings.hpp"
#include "core/scenario/captured_program.hpp"
#include "core/scenario/value_flow.hpp"

namespace shardcheck::core::values {

using Of = CapturedValue::Of;
using ByRank = std::map<int, const CapturedValue*>;
using TensorStep = std::tuple<int, int32_t, int32_t>;  // (rank, tensor name, optimizer step)

// What the walk saw where it mattered.
struct Observed {
  std::map<TensorStep, ValueFact> grads;                // a gradient's bytes as its optimizer step took them
  std::map<TensorStep, ValueFact> params;               // a parameter's bytes before its optimizer step
  std::map<std::pair<int, int32_t>, ValueFact> inputs;  // (rank, record): a collective's input as issued
  std::map<std::pair<int, int32_t>, int32_t> steps;     // (rank, record): the steps begun before it
  // Each rank's losses (the tensors its backwards started from), in order: what they carried.
  std::vector<std::vector<std::pair<const CapturedValue*, RankMask>>> losses;
  // rank -> the ranks that compute one loss with it (tensor parallelism), itself alone otherwise.
  std::vector<RankMask> together;
  // The losses the ranks of `terms` compute: each group of ranks that computes one loss together
  // counts once.
  int losses_in(RankMask terms) const;
};

Observed observe(const CapturedProgram& p);

std::string source_of(const CapturedProgram& p, int32_t source);
SourceLine line_of(const CapturedProgram& p, int32_t source);
std::string ranks_text(const std::vector<int>& ranks);
std::string number(double x);
const CapturedGroup& group_of(const CapturedProgram& p, int rank, const CapturedRecord& rec);
// The ranks of `m` grouped by equal digests, each group ascending, groups by their first rank.
std::vector<std::vector<int>> classes(const ByRank& m);
ByRank only(const ByRank& m, const std::vector<int>& ranks);
RankMask mask_of(const std::vector<int>& ranks);
// "'a', 'b', 'c' and 2 more"
std::string names_text(const CapturedProgram& p, const std::vector<int32_t>& tensors, size_t shown = 3);

void replica_findings(const CapturedProgram& p, const Observed& seen, std::vector<Finding>& out);
void double_findings(const CapturedProgram& p, const Observed& seen, std::vector<Finding>& out);
void divisor_findings(const CapturedProgram& p, const Observed& seen, std::vector<Finding>& out);
void norm_findings(const CapturedProgram& p, std::vector<Finding>& out);

}  // namespace shardcheck::core::values
