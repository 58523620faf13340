// Running one TrainingCase on the simulator exactly as `shardcheck run` would run its scenario
// file (same options, same oracle, one schedule), while also recording what the properties
// judge and the oracles do not expose: every rank's collectives per process group (through a
// recording Runtime around the simulator's), its live bytes at every step end, its reported
// gradient norms and the finalized gradients it holds.
//   TrainingOutcome o = run_training_case(c);
//   o.findings, o.weights[step][logical], o.resting_bytes[rank][step], o.collectives
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/check/findings.hpp"
#include "core/train/reference.hpp"
#include "properties/cases.hpp"

namespace shardcheck::properties {

struct TrainingOutcome {
  std::string error;        // an internal error of the tool (or a case the core refuses); not a verdict
  bool completed = false;   // every rank finished every step and every stream drained
  int steps_completed = 0;  // steps every rank reported to the observers
  std::vector<core::Finding> findings;  // detectors' and oracle's, as `shardcheck run` reports them
  uint64_t trace_digest = 0;
  // Per step: the logical main weights assembled from every rank's pieces (empty when a piece
  // is missing), and the logical finalized gradients (lowest rank's copy of each element).
  std::vector<std::vector<std::vector<float>>> weights;
  std::vector<std::vector<std::vector<float>>> grads;
  std::vector<std::vector<std::vector<bool>>> grad_seen;  // per step, logical, element
  std::vector<std::vector<double>> norms;                 // per rank, per step
  std::vector<std::vector<int64_t>> resting_bytes;        // per rank, per step
  // Per process group ("name [members]"), per member rank: the fingerprints of its
  // collectives on that group, in issue order.
  std::map<std::string, std::map<int, std::vector<std::string>>> collectives;
};

// What a run needs beyond the case: the reference (computed once per case and shared) and
// whether to keep the oracles' inputs (weights and gradients).
struct RunNeeds {
  const core::ReferenceResult* reference = nullptr;  // null: computed here when needed
  bool oracle = true;                                // judge against the reference and replicas (findings)
};

TrainingOutcome run_training_case(const TrainingCase& c, const RunNeeds& needs = {});

// The single-rank reference for a case's configuration and data-parallel size.
core::ReferenceResult reference_for(const TrainingCase& c);

// The case DistOpt would be compared on: the same training, strategy distopt, no mutations,
// and a 2-D data-parallel mesh flattened to one dp axis of the same size (the same data per
// data-parallel rank, since dp ranks are numbered row-major either way).
TrainingCase distopt_twin(const TrainingCase& c);

}  // namespace shardcheck::properties
