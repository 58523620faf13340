// The generators. Every pick is an integer range (RapidCheck shrinks those toward the low
// end), mapped through a table whose first entry is the simplest choice; dependent limits
// (layers >= pp*vpp, microbatches a multiple of pp under vpp, world size <= 16) are applied
// after the picks, so every shrink of a pick is still a valid case.
#include "properties/generators.hpp"

#include <algorithm>
#include <utility>

namespace shardcheck::properties {

namespace {

using core::Strategy;

// An entry of `table` by weight; shrinks toward the first entry. The weights hold from the
// first case on: RapidCheck's size ramp (small values first) suits magnitudes such as the
// model's dimensions, not a choice among strategies or meshes.
template <class T>
T pick(const std::vector<std::pair<int, T>>& table) {
  int total = 0;
  for (const auto& [w, v] : table) total += w;
  int u = *rc::gen::resize(rc::kNominalSize, rc::gen::inRange(0, total));
  for (const auto& [w, v] : table) {
    if (u < w) return v;
    u -= w;
  }
  return table.back().second;
}

int pick_int(int lo, int hi) { return *rc::gen::inRange(lo, hi + 1); }  // [lo, hi]

core::Precision precision(bool exact_only) {
  // exact fp32, exact with bf16 model weights (still bitwise), mixed bf16, plain fp32.
  const int mode = exact_only ? pick<int>({{2, 0}, {1, 1}}) : pick<int>({{2, 0}, {1, 1}, {1, 2}, {1, 3}});
  core::Precision p;
  p.exact = mode <= 1;
  p.param = mode == 0 || mode == 3 ? core::DType::f32 : core::DType::bf16;
  return p;
}

void mesh(TrainingCase& c) {
  // Pipelines, and interleaved ones in particular, are where most seed bugs live (tied
  // embeddings across stages, shared contexts, receive buffers reusing freed blocks), so they
  // get more weight than their share of real configurations.
  c.pp = pick<int>({{3, 1}, {4, 2}, {1, 3}, {1, 4}});
  if (c.pp == 2) c.vpp = pick<int>({{1, 1}, {2, 2}, {1, 3}});
  if (c.pp == 3) c.vpp = pick<int>({{1, 1}, {1, 2}});  // layers <= 4, except 6 for pp*vpp = 6
  const int max_dp = std::min(8, 16 / c.pp);
  if (c.two_dimensional()) {
    c.dp_outer = pick<int>({{1, 1}, {3, 2}, {1, 3}, {1, 4}});
    c.dp_inner = pick<int>({{1, 1}, {3, 2}, {1, 3}, {1, 4}});
    while (c.dp_outer * c.dp_inner > max_dp) (c.dp_inner > 1 ? c.dp_inner : c.dp_outer)--;
  } else {
    c.dp = std::min(max_dp, pick<int>({{1, 1}, {4, 2}, {2, 3}, {2, 4}, {1, 5}, {1, 6}, {1, 7}, {1, 8}}));
  }
}

void model(TrainingCase& c) {
  core::ModelConfig& m = c.config.model;
  m.vocab = pick_int(2, 64);
  m.hidden = pick_int(1, 16);
  m.seq = pick_int(1, 8);
  m.layers = std::max(pick_int(1, 4), c.pp * c.vpp);
  m.tied = pick<bool>({{3, true}, {1, false}});
  m.init_seed = static_cast<uint64_t>(pick_int(1, 10000));
}

void schedule(TrainingCase& c, const CaseSpace& space) {
  std::vector<std::pair<int, sim::Policy>> policies;
  for (sim::Policy p : space.policies) policies.push_back({1, p});
  c.policy = pick(policies);
  c.schedule_seed = static_cast<uint64_t>(pick_int(1, 1000));
  c.reuse_earliest = pick<bool>({{1, false}, {1, true}});
}

}  // namespace

rc::Gen<TrainingCase> gen_training_case(CaseSpace space) {
  return rc::gen::exec([space] {
    TrainingCase c;
    core::TrainingConfig& t = c.config;
    // ZeRO-1 and HFSDP allocate a fresh main_grad every step and keep O != P: the most
    // state-machine and post-step traffic, so the most to get wrong.
    std::vector<std::pair<int, Strategy>> strategies{
        {1, Strategy::no_shard},           {3, Strategy::optim}, {1, Strategy::optim_grads},
        {1, Strategy::optim_grads_params}, {1, Strategy::hsdp},  {2, Strategy::hfsdp}};
    if (space.with_distopt) strategies.push_back({1, Strategy::distopt});
    t.strategy = pick(strategies);
    mesh(c);
    model(c);
    t.precision = precision(space.exact_only);
    t.microbatches = pick_int(1, 4);
    if (c.vpp > 1) t.microbatches = std::max(c.pp, t.microbatches / c.pp * c.pp);
    t.micro_batch_size = pick_int(1, 2);
    t.steps = pick_int(2, 3);
    t.optimizer.kind = pick<core::OptimizerConfig::Kind>(
        {{4, core::OptimizerConfig::Kind::adam}, {1, core::OptimizerConfig::Kind::sgd}});
    t.optimizer.lr = pick<double>({{1, 1e-3}, {1, 1e-2}});
    t.optimizer.clip_grad = pick<double>({{3, 1.0}, {1, 0.0}});
    t.unified_comm = pick<bool>({{3, false}, {1, true}});
    t.data_seed = static_cast<uint64_t>(pick_int(1, 1000));
    schedule(c, space);
    return c;
  });
}

rc::Gen<LayoutCase> gen_layout_case() {
  return rc::gen::exec([] {
    LayoutCase c;
    if (pick<bool>({{3, false}, {1, true}})) {
      c.outer = pick_int(2, 4);
      c.ranks = c.outer * pick_int(1, 4);
    } else {
      c.ranks = pick_int(1, 8);
    }
    const int n = pick_int(1, 8);
    for (int i = 0; i < n; ++i) {
      if (i > 0 && pick<bool>({{4, false}, {1, true}})) {  // a tied entry: an earlier parameter again
        const int j = pick_int(0, i - 1);
        c.shapes.push_back(c.shapes[j]);
        c.ids.push_back(c.ids[j]);
        continue;
      }
      core::Shape s{pick_int(1, 16)};
      if (pick<bool>({{1, false}, {1, true}})) s.push_back(pick_int(1, 16));
      c.shapes.push_back(s);
      c.ids.push_back(i);
    }
    return c;
  });
}

void showValue(const TrainingCase& c, std::ostream& os) { os << describe(c); }
void showValue(const LayoutCase& c, std::ostream& os) { os << describe(c); }

}  // namespace shardcheck::properties
