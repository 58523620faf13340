// What the property generators produce: plain configuration structs, each describable in one
// line and writable as a runnable scenario file (docs/semantics.md §5), so a shrunk counterexample
// can be replayed with `shardcheck run`.
//   TrainingCase c;  c.config.strategy = core::Strategy::optim;  c.pp = 2;  c.dp = 2;  c.vpp = 2;
//   describe(c)  ->  "optim on (pp=2, dp=2, vpp=2), model V64 H16 L4 S8 tied, exact fp32, ..."
//   training_scenario_yaml(c, "props-no_findings-1", "why it failed", {findings: []})
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/layout/layout.hpp"
#include "core/layout/mesh.hpp"
#include "core/strategies/training_config.hpp"
#include "sim/options.hpp"

namespace shardcheck::properties {

// One simulated training run: the training configuration, the mesh, and the schedule it
// runs under. hsdp and hfsdp run on (dp_outer, dp_inner); every other strategy on dp.
struct TrainingCase {
  core::TrainingConfig config;
  int pp = 1;
  int vpp = 1;                     // model chunks per pipeline rank; > 1 only with pp > 1
  int dp = 1;                      // 1-D strategies
  int dp_outer = 1, dp_inner = 1;  // hsdp, hfsdp
  sim::Policy policy = sim::Policy::random;
  uint64_t schedule_seed = 1;
  int pct_depth = 3;
  bool reuse_earliest = false;  // allocator {model: caching, reuse: earliest}

  bool two_dimensional() const { return core::is_two_dimensional(config.strategy); }
  int dp_total() const { return two_dimensional() ? dp_outer * dp_inner : dp; }
  int world_size() const { return pp * dp_total(); }
  // pp first (so lower ranks hold earlier stages), then the dp axes, then vpp.
  std::vector<core::Axis> axes() const;
  std::shared_ptr<const core::Mesh> mesh() const;
  sim::Options sim_options() const;  // what `shardcheck run` derives from the scenario file
};

// A parameter group's shapes over D ranks, for the layout and redistribute properties.
// `ids` gives each entry's parameter identity: a tied parameter registered under several
// names appears with one id several times and is one entry of the group.
struct LayoutCase {
  std::vector<core::Shape> shapes;  // per registered name
  std::vector<int> ids;             // same length as shapes
  int ranks = 1;                    // D: dp, or dp_outer * dp_inner
  int outer = 1;                    // > 1: a 2-D mesh (outer, ranks / outer)
  // The group's tensors after dropping repeated ids (first appearance order).
  std::vector<core::Shape> unique_shapes() const;
};

std::string describe(const TrainingCase& c);
std::string describe(const LayoutCase& c);
std::string describe_precision(const core::Precision& p);
// "shardcheck layout --shapes 5x4,2x6,3 --ranks 2": the layout of the case's unique tensors.
std::string layout_command(const LayoutCase& c);

// The expectation a saved counterexample carries, as YAML flow text ("{findings: []}").
std::string training_scenario_yaml(const TrainingCase& c, const std::string& name,
                                   const std::string& description, const std::string& expect);
// A trace program (docs/semantics.md §5) that writes every tensor of the layout and nothing else,
// reduce-scatters, all-gathers and reads each tensor back: it exercises the same byte
// ranges the layout property judged, so gaps or overlaps show as findings when run.
std::string layout_scenario_yaml(const LayoutCase& c, const std::string& name,
                                 const std::string& description);

}  // namespace shardcheck::properties
