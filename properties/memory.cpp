// The resting-memory formulas of memory.hpp, computed from the layouts alone (never from a
// run), so the property compares the simulator's live bytes against an independent account.
#include "properties/memory.hpp"

#include "core/model/model.hpp"
#include "core/strategies/distopt_engine.hpp"
#include "core/strategies/param_groups.hpp"

namespace shardcheck::properties {

namespace {

constexpr int64_t kFixedBytes = 8 + 8;  // clip coefficient and gradient norm, f64 each

int pp_rank_of(const TrainingCase& c, int rank) {
  const auto mesh = c.mesh();
  const auto pp = mesh->find_axis("pp");
  return pp ? mesh->coords(rank)[*pp] : 0;
}

MemoryPrediction distopt_bytes(const TrainingCase& c, const core::ModelLayout& m,
                               const std::vector<int>& units) {
  MemoryPrediction p;
  const int dp = c.dp_total();
  const int64_t t =
      core::DistOptLayout::create(m, units, dp, core::DistOptLayout::bucket_elems(c.config, dp)).total;
  int64_t logical = 0;
  for (int u : units) {
    for (int q : m.units()[u].params) logical += core::numel(m.params()[q].shape);
  }
  const int64_t pb = core::dtype_bytes(c.config.precision.param);
  p.bytes = kFixedBytes + t * (pb + 4) + 3 * 4 * t / dp;
  p.logical_bytes = kFixedBytes + logical * (pb + 4) + 3 * 4 * logical / dp;
  p.terms.push_back("distopt buffer T=" + std::to_string(t) + " (" + std::to_string(logical) +
                    " logical): params " + std::to_string(t * pb) + " + grads " + std::to_string(t * 4) +
                    " + main, adam m, v " + std::to_string(3 * 4 * t / dp));
  return p;
}

}  // namespace

MemoryPrediction resting_bytes(const TrainingCase& c, int rank) {
  const core::ModelLayout m = core::ModelLayout::create(c.config.model, c.pp, c.vpp).value();
  const std::vector<int> units = core::units_of_rank(m, pp_rank_of(c, rank));
  if (c.config.strategy == core::Strategy::distopt) return distopt_bytes(c, m, units);
  const core::StrategyPlacements pl = core::placements_for(c.config.strategy);
  const std::vector<int> sizes =
      c.two_dimensional() ? std::vector<int>{c.dp_outer, c.dp_inner} : std::vector<int>{c.dp};
  int64_t f = 1;
  for (size_t i = 0; i < pl.main.size(); ++i) f *= pl.main[i].is_flat() ? sizes[i] : 1;
  const core::Precision& pr = c.config.precision;
  const int64_t model_b = pr.param == core::DType::f32 ? 0 : core::dtype_bytes(pr.param);
  const int64_t per_element = 4 + 2 * 4 + core::dtype_bytes(pr.grad) + model_b;
  MemoryPrediction p;
  p.bytes = p.logical_bytes = kFixedBytes;
  for (int u : units) {
    std::vector<core::ParamKey> keys;
    for (int q : m.units()[u].params) keys.push_back({q, pr.param, true});
    for (const std::vector<int>& group : core::partition_parameters(keys)) {
      std::vector<core::Shape> shapes;
      int64_t logical = 0;
      for (int q : group) {
        shapes.push_back(m.params()[q].shape);
        logical += core::numel(m.params()[q].shape);
      }
      const int64_t s = core::GlobalLayout::create(shapes, c.dp_total()).value().size();
      p.bytes += s / f * per_element;
      p.logical_bytes += logical * per_element / f;
      p.terms.push_back(m.units()[u].name + ": S=" + std::to_string(s) + " (" + std::to_string(logical) +
                        " logical) / F=" + std::to_string(f) + ": main " + std::to_string(4 * s / f) +
                        " + adam " + std::to_string(8 * s / f) + " + main_grad " +
                        std::to_string(core::dtype_bytes(pr.grad) * s / f) + " + model " +
                        std::to_string(model_b * s / f));
    }
  }
  return p;
}

}  // namespace shardcheck::properties
