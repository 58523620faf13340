// The checks behind the property table (properties.cpp): one case in, a verdict out. Layout
// checks live in layout_properties.cpp, training checks in training_properties.cpp.
#pragma once

#include "properties/properties.hpp"

namespace shardcheck::properties {

Verdict check_layout_partitions(const LayoutCase& c);
Verdict check_redistribute_round_trip(const LayoutCase& c);
Verdict check_matches_reference(const TrainingCase& c);
Verdict check_matches_distopt(const TrainingCase& c);
Verdict check_collective_fingerprints(const TrainingCase& c);
Verdict check_no_findings(const TrainingCase& c);
Verdict check_resting_memory(const TrainingCase& c);
Verdict check_grad_norm(const TrainingCase& c);
Verdict check_same_seed_same_trace(const TrainingCase& c);

}  // namespace shardcheck::properties
