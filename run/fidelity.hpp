// A captured program's collectives set beside a training scenario's: does the simulator's
// engine issue, rank by rank, the collectives the real code issued? `shardcheck compare FILE
// --capture DIR` prints it (docs/fidelity.md holds the table for Megatron-FSDP).
//   auto c = collective_sequences(capture_scenario);   auto m = collective_sequences(training);
//   FidelityResult r = compare_sequences(*c, *m);       // r.equal(), r.ranks[0].differences
// Each rank's two sequences are aligned on what a collective is on the wire (op, group
// members, dtype, input and output element counts): the longest common subsequence, so a
// collective only one side issues is reported once instead of shifting every later one. An
// aligned pair must also agree on the reduce op, the root and the stream, streams being
// matched one to one in the order they first carry a collective (each side names its own).
#pragma once

#include <string>
#include <vector>

#include "core/base/status.hpp"
#include "run/scenario.hpp"
#include "sim/collective_log.hpp"

namespace shardcheck::run {

using CollectiveSequence = std::vector<sim::IssuedCollective>;

// Every rank's collectives in one run of the scenario's first schedule (the training's
// oracles are not run). An error when the run does not finish.
core::Expected<std::vector<CollectiveSequence>> collective_sequences(const LoadedScenario& s);

struct SequenceDifference {
  enum class Kind { captured_only, modeled_only, differs };
  Kind kind = Kind::differs;
  int64_t captured = -1, modeled = -1;  // positions in each rank's sequence; -1: none
  std::string what;                     // differs: the fields, "reduce op avg vs sum; stream"
  // Where the other side stands at a one-sided difference: the position of its next collective
  // (its length when none follows).
  int64_t captured_next = 0, modeled_next = 0;
};

struct RankFidelity {
  int rank = 0;
  int64_t captured = 0, modeled = 0;            // collectives on each side
  std::vector<SequenceDifference> differences;  // in sequence order
};

struct FidelityResult {
  std::vector<RankFidelity> ranks;
  std::string problem;  // the two cannot be compared (different rank counts)
  bool equal() const;
};

FidelityResult compare_sequences(const std::vector<CollectiveSequence>& captured,
                                 const std::vector<CollectiveSequence>& modeled);

// One collective as the comparison prints it: "reduce_scatter [0,1,2,3] f32 8768->2192 avg on
// 'rs' ('block.0:grad')", with its Python line where there is one.
std::string describe(const sim::IssuedCollective& c);

// The differences of every rank, grouped: how many times each collective kind and name is
// captured only, modeled only or aligned with differing fields (the lines of the summary).
std::vector<std::string> summarize(const FidelityResult& r, const std::vector<CollectiveSequence>& captured,
                                   const std::vector<CollectiveSequence>& modeled);

}  // namespace shardcheck::run
