// The simulator's detectors, one row each, in the order the world calls them: a new detector
// is its type (sim/detect_<family>.cpp) and a row here. tests/run/finding_kinds_test.cpp holds
// every kind the detectors find to a row of its family.
#include "sim/detector.hpp"

namespace shardcheck::sim {

namespace {
// The layout detector looks at a reduction before the collective one: a layout_mismatch
// explains the call, and the collective detector then adds no mismatch of its own.
constexpr DetectorEntry kDetectors[] = {
    {"race", make_race_detector},         {"uninit", make_uninit_detector},
    {"layout", make_layout_detector},     {"collective", make_collective_detector},
    {"deadlock", make_deadlock_detector},
};
}  // namespace

std::span<const DetectorEntry> detector_table() { return kDetectors; }

}  // namespace shardcheck::sim
