// The generators. Every pick is an integer range (RapidCheck shrinks those toward the low
// end), mapped through a table whose first entry is the simplest choice; dependent limits
// (layers >= pp*vpp, microbatches a multiple of pp under vpp, world size <= 16) are applied
// after the picks, so every shrink of a pick is still a valid case. Cases past RapidCheck's
// nominal size (runs of more than 100 cases) grow beyond that space: see grow().
#include "properties/generators.hpp"

#include <algorithm>
#include <cmath>
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

// How far past RapidCheck's nominal size (100, where every pick above reaches its full range)
// this case's size lies: 0 up to 100, 1 at kMaxSize. Only runs of more than 100 cases go past
// 100 (suite.cpp), so the bounded suites keep the small space. Read after every other pick, so
// that the small space's cases are drawn exactly as before.
double growth() {
  const int size = *rc::gen::withSize([](int s) { return rc::gen::just(s); });
  return std::clamp(static_cast<double>(size - rc::kNominalSize) / (kMaxSize - rc::kNominalSize), 0.0, 1.0);
}

// An extra amount in [0, round(max_extra * g)], shrinking to 0; no pick at all when that is 0.
int extra(int max_extra, double g) {
  const int hi = static_cast<int>(std::lround(max_extra * g));
  return hi > 0 ? pick_int(0, hi) : 0;
}

core::Precision precision(bool exact_only) {
  // exact fp32, exact with bf16 model weights (still bitwise), mixed bf16, plain fp32.
  const int mode = exact_only ? pick<int>({{2, 0}, {1, 1}}) : pick<int>({{2, 0}, {1, 1}, {1, 2}, {1, 3}});
  core::Precision p;
  p.exact = mode <= 1;
  p.param = mode == 0 || mode == 3 ? core::DType::f32 : core::DType::bf16;
  return p;
}

void mesh(TrainingCase& c) {
  // Pipelines, and interleaved ones in particular, are where most catalog bugs live (tied
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

// Past the nominal size, up to: vocab 256, hidden 64, seq 16, layers 8, microbatches 8 of up
// to 4 sequences, dp 16 and worlds of 32 ranks. Each increase is its own pick and shrinks to
// none, so a failure of a grown case still shrinks to the small space where it can.
void grow(TrainingCase& c, double g) {
  core::ModelConfig& m = c.config.model;
  core::TrainingConfig& t = c.config;
  m.vocab += extra(192, g);
  m.hidden += extra(48, g);
  m.seq += extra(8, g);
  m.layers = std::max<int64_t>(m.layers, std::min<int64_t>(8, m.layers + extra(4, g)));
  t.microbatches += extra(4, g);
  if (c.vpp > 1) t.microbatches = std::max(c.pp, t.microbatches / c.pp * c.pp);
  t.micro_batch_size += extra(2, g);
  const int max_dp = std::min(16, 32 / c.pp);
  if (extra(1, g) == 1) {  // twice the data-parallel ranks, where the world allows it
    if (c.two_dimensional() && c.dp_outer * c.dp_inner * 2 <= max_dp) {
      c.dp_inner *= 2;
    } else if (!c.two_dimensional() && c.dp * 2 <= max_dp) {
      c.dp *= 2;
    }
  }
}

void grow(LayoutCase& c, double g) {
  // More tensors with up to 64 rows, 3-D ones among them, and up to twice the ranks. The new
  // rows (the product of the dims after the first) stay products of 2s and 3s up to 16, so
  // the chunk, the lcm of all rows, stays within what the small space already reaches: a
  // layout's size is a multiple of chunk * ranks, and the simulator holds every element.
  static const int kRowDims[] = {1, 2, 3, 4};
  const int more = extra(8, g);
  const int rows_max = 16 + static_cast<int>(std::lround(48 * g));
  for (int i = 0; i < more; ++i) {
    core::Shape s{pick_int(1, rows_max)};
    const int dims = pick_int(1, 3);
    for (int d = 1; d < dims; ++d) s.push_back(kRowDims[pick_int(0, 3)]);
    c.ids.push_back(static_cast<int>(c.shapes.size()));
    c.shapes.push_back(s);
  }
  if (extra(1, g) == 1 && c.ranks * 2 <= 16) c.ranks *= 2;  // a 2-D mesh keeps its outer size
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
    if (const double g = growth(); g > 0) grow(c, g);
    t.overlap = pick<bool>({{1, false}, {1, true}});  // drawn last: earlier draws stay as they were
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
    if (const double g = growth(); g > 0) grow(c, g);
    return c;
  });
}

void showValue(const TrainingCase& c, std::ostream& os) { os << describe(c); }
void showValue(const LayoutCase& c, std::ostream& os) { os << describe(c); }

}  // namespace shardcheck::properties
