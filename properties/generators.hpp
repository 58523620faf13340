// RapidCheck generators for the property suite: training cases (meshes with dp 1-8, 2-D dp,
// pp 1-4, vpp 1-3; strategies; precision modes; microbatch counts; schedule policies and
// seeds; allocator reuse) and layout cases (1-D and 2-D shape lists, uneven, fragments
// smaller than a chunk, tied entries). Every choice shrinks toward the simplest value (dp 1,
// no pipeline, the first strategy, exact fp32, fewest microbatches and steps), so a failing
// case shrinks to the smallest configuration that still fails.
//   rc::Gen<TrainingCase> g = gen_training_case({.exact_only = true});
//   const TrainingCase c = *g;   // inside a property
#pragma once

#include <rapidcheck.h>

#include <ostream>
#include <vector>

#include "properties/cases.hpp"

namespace shardcheck::properties {

// RapidCheck's size runs from 0 to its nominal 100, over which every pick ramps to its full
// range (the space described above). Runs of more than 100 cases go on to kMaxSize, and the
// cases past 100 grow past that space, to TinyLM up to V256 H64 L8 S16 with 8 microbatches of
// 4 sequences on up to 16 dp ranks (worlds of 32), and layouts of up to 16 tensors of up
// to 64 rows (3-D ones among them) over up to 16 ranks.
constexpr int kMaxSize = 200;

// Which training cases a property draws from.
struct CaseSpace {
  bool exact_only = false;   // precision {exact: true} (fp32 or bf16 params)
  bool with_distopt = true;  // distopt among the strategies
  std::vector<sim::Policy> policies{sim::Policy::random, sim::Policy::pct, sim::Policy::in_order,
                                    sim::Policy::delay_comm};
};

rc::Gen<TrainingCase> gen_training_case(CaseSpace space);
rc::Gen<LayoutCase> gen_layout_case();

// How RapidCheck prints a case in a counterexample.
void showValue(const TrainingCase& c, std::ostream& os);
void showValue(const LayoutCase& c, std::ostream& os);

}  // namespace shardcheck::properties
