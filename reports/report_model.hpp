// What a report says: the scenarios that ran, what each expected and found, how many
// schedules it took, and every finding with its reproducer and the data for its picture.
// The renderers (Markdown, HTML with SVG, JSON) all read this one model.
//   Report r; r.scenarios.push_back(result);  write_report(r, "out/demo");
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/base/trace_log.hpp"
#include "core/check/findings.hpp"

namespace shardcheck::reports {

// One curve of per-step losses (e.g. "optim_grads_params" and "distopt").
struct LossSeries {
  std::string label;
  std::vector<double> losses;  // index = step
};

// A `shardcheck compare` result.
struct CompareData {
  std::string against;  // single_rank | distopt | sim
  std::vector<LossSeries> series;
  double max_abs_diff = 0;
  double max_rel_diff = 0;
  bool bitwise_equal = false;   // weights bitwise equal after the last step
  std::string first_divergent;  // "step 2, tensor layers.1.fc1.weight, element 17" or empty
  double achievable_loss = -1;  // the data's entropy rate in nats, when known (< 0: unknown)
  // The schedule both trainings ran: "seed 3 (the schedule that found the
  // numerics_divergence above)". A finding's schedule is the one compared when there is one.
  std::string schedule;
};

// The determinism check of a scenario: its schedules rerun with the same seeds.
struct DeterminismData {
  int runs = 0;          // schedules rerun and compared
  bool matched = true;   // every trace digest (and the findings) repeated
  std::string mismatch;  // the first difference; empty when matched
};

// What a scenario's exploration covered, summed over its schedules: what a clean verdict rests on.
struct CheckedData {
  int64_t scheduler_steps = 0;
  int64_t operations = 0;              // stream operations run
  int64_t collectives = 0;             // collectives and point-to-point transfers run
  int64_t bytes_checked = 0;           // bytes of device memory accesses checked for races and definedness
  int training_steps = 0;              // per schedule (0: a trace scenario)
  std::vector<std::string> detectors;  // the finding kinds looked for
};

struct ScenarioResult {
  std::string name;
  std::string file;
  std::string kind;         // trace | training
  std::string description;  // the file's two-sentence description
  std::string expected;     // core::describe(expect): "stream_race", "clean", ...
  std::vector<core::FindingKind> found;
  bool met = false;
  // false when the run stopped before its first schedule finished: nothing was judged, so it
  // neither met its expectation nor failed it (met is false, and every output says "no verdict").
  bool judged = true;
  // A captured program whose ranks did not all finish: where and why each stopped; "" otherwise.
  std::string partial;
  int schedules = 0;          // schedules explored
  uint64_t trace_digest = 0;  // sim::combined_digest of the schedules' trace digests (0 when none ran)
  double seconds = 0;         // wall time of this scenario
  std::vector<core::Finding> findings;
  // Parallel to `findings`: the timeline of the run that first found each one (may be empty).
  std::vector<core::TraceLog> finding_traces;
  std::optional<CompareData> compare;
  std::string error;     // an internal error, if one happened
  std::string policy;    // schedule policy used, for the reproducer line
  bool complete = true;  // false when a signal or an internal error cut its exploration short
  std::optional<DeterminismData> determinism;  // set when the check ran
  std::optional<CheckedData> checked;          // set when schedules ran on the simulator
};

struct Report {
  static constexpr int kSchemaVersion = 1;
  std::string title = "shardcheck report";
  std::string command;   // the command line that produced it
  bool complete = true;  // false when the run was interrupted or hit an internal error
  std::string incomplete_reason;
  std::string stopped;  // why it is incomplete, as a stable name: kInterrupted, kInternalError or kBadInput
  static constexpr const char* kInterrupted = "interrupted";
  static constexpr const char* kInternalError = "internal_error";
  // A run reached the simulator's own bound (memory, steps): the file needs more than a run may take.
  static constexpr const char* kBadInput = "bad_input";
  std::vector<ScenarioResult> scenarios;
};

// The reproducer a user runs to see a finding again, starting with command_name().
std::string reproducer(const ScenarioResult& s, const core::Finding& f);

// How reproducer lines invoke shardcheck: "shardcheck" (the default, and what the executable
// sets when PATH finds it), else the path it was run by. Set once, before any report is made.
void set_command_name(std::string name);
const std::string& command_name();

}  // namespace shardcheck::reports
