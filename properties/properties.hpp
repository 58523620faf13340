// The properties of the suite: each a name, the sentence saying why it must hold, the cases
// it draws from, and a check of one case. A check says pass, fail (with what differs),
// discard (the case cannot be judged, e.g. memory at rest of a run that never reached a step
// end; RapidCheck draws another), or error: the tool itself failed (an internal error of the
// simulator or the core), which is never counted as the property catching anything.
//   for (const Property& p : all_properties()) std::cout << p.name << ": " << p.why << "\n";
//   Verdict v = find_property("no_findings")->check_training(training_case);
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "properties/cases.hpp"
#include "properties/generators.hpp"

namespace shardcheck::properties {

struct Verdict {
  enum class Kind : uint8_t { pass, fail, error, discard };
  Kind kind = Kind::pass;
  std::string message;
  bool passed() const { return kind == Kind::pass; }
  static Verdict pass() { return {}; }
  static Verdict fail(std::string m) { return {Kind::fail, std::move(m)}; }
  static Verdict error(std::string m) { return {Kind::error, std::move(m)}; }
  static Verdict discard(std::string m) { return {Kind::discard, std::move(m)}; }
};

struct Property {
  std::string name;
  std::string why;  // one sentence: why it must hold
  // Exactly one of the two checks is set: layout properties draw LayoutCases, training
  // properties TrainingCases (and are the ones a mutation of docs/semantics.md §4 can break).
  std::function<Verdict(const LayoutCase&)> check_layout;
  std::function<Verdict(const TrainingCase&)> check_training;
  CaseSpace space;  // for training properties
  bool training() const { return static_cast<bool>(check_training); }
};

// In suite order: layout_partitions, redistribute_round_trip, matches_reference,
// matches_distopt, collective_fingerprints, no_findings, resting_memory, grad_norm,
// same_seed_same_trace.
const std::vector<Property>& all_properties();
const Property* find_property(const std::string& name);

}  // namespace shardcheck::properties
