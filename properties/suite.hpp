// Running the properties under RapidCheck, seeded from the command's --seed (never from the
// clock or the machine), shrinking a failure to a minimal counterexample, saving it as a
// runnable scenario file (`<out>/props/<property>-<n>.yaml`), and the mutation score: the
// suite run once per catalog bug of docs/semantics.md §4, each of which some property must catch.
//   SuiteOptions o;  o.cases = 100;  o.seed = 1;
//   PropertyResult r = check_property(*find_property("no_findings"), o);
//   if (r.status == PropertyResult::Status::failed) std::cout << r.shrunk << " -> " << r.file;
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "properties/properties.hpp"

namespace shardcheck::properties {

struct SuiteOptions {
  int cases = 100;
  uint64_t seed = 1;
  std::string out_dir = "out";
  bool save = true;                        // write counterexamples under out_dir/props/
  std::optional<core::Mutation> mutation;  // forced on in every training case
  // Property evaluations spent shrinking a failure before the smallest case so far is kept:
  // a bound on the time one failure can take.
  int shrink_budget = 150;
  // Threads checking cases at once (0: one per core). Cases are drawn and shrunk on one
  // thread and only their checks spread, so the result is the same for every value.
  int jobs = 1;
  // Deal the checks out to the processes of an MPI launch too (run/processes.hpp); every
  // process then runs the same properties in the same order.
  bool across_processes = false;
};

struct PropertyResult {
  enum class Status : uint8_t { passed, failed, error, gave_up };
  std::string property;
  Status status = Status::passed;
  int cases = 0;        // generated cases checked, the failing one included
  int shrinks = 0;      // accepted shrinking steps
  int evaluations = 0;  // checks run in all (cases and shrink candidates)
  std::string message;  // what failed, for the shrunk case
  std::string shrunk;   // the shrunk case, described
  std::string file;     // the saved scenario, "" when none
  std::string note;     // anything the user should know about the saved file
  double seconds = 0;
};
std::string_view to_string(PropertyResult::Status s);  // "passed", "FAILED", "ERROR", "GAVE UP"

PropertyResult check_property(const Property& p, const SuiteOptions& o);

struct MutationResult {
  core::Mutation mutation = core::Mutation::main_grad_alloc_default_stream;
  std::vector<PropertyResult> results;  // every training property, in suite order
  double seconds = 0;
  // The first property (in suite order) that failed; null when the mutation went unnoticed.
  // An internal error never counts as catching it.
  const PropertyResult* first() const;
  bool caught() const { return first() != nullptr; }
};

// Runs every training property (or only `only`) with `m` forced on: the suite, once. The
// layout properties take no training configuration, so no catalog bug can reach them.
MutationResult check_mutation(core::Mutation m, const SuiteOptions& o, const Property* only = nullptr);

// Re-checks a saved training counterexample: the property named by `property` (or, when
// empty, by the scenario's name, props-<property>-<n>) on the scenario's case.
struct ReplayResult {
  std::string property;
  Verdict verdict;
  std::string error;  // the file could not be replayed (bad input)
};
ReplayResult replay_scenario(const std::string& path, std::string property);

// One line per property (name, cases, verdict) and, on failure, the shrunk case and its file.
void print_result(std::ostream& out, const PropertyResult& r);

}  // namespace shardcheck::properties
