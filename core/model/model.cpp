// TinyLM parameters, units and stage placement.
#include "core/model/model.hpp"

namespace shardcheck::core {

namespace {

int add_logical(std::vector<std::string>& names, std::vector<Shape>& shapes, const std::string& n,
                const Shape& s) {
  names.push_back(n);
  shapes.push_back(s);
  return static_cast<int>(names.size() - 1);
}

}  // namespace

Expected<ModelLayout> ModelLayout::create(const ModelConfig& cfg, int pp, int vpp) {
  for (auto [v, what] : {std::pair{cfg.vocab, "vocab"}, {cfg.hidden, "hidden"}, {cfg.seq, "seq"}}) {
    if (v < 1 || v > kMaxDim) return fail("model ", what, " is ", v, "; it must be between 1 and ", kMaxDim);
  }
  if (cfg.layers < 1 || cfg.layers > kMaxLayers)
    return fail("model layers must be between 1 and ", kMaxLayers);
  if (pp < 1 || vpp < 1) return fail("pipeline sizes must be at least 1");
  if (cfg.layers < static_cast<int64_t>(pp) * vpp) {
    return fail("model has ", cfg.layers, " layers but the pipeline has ", pp * vpp,
                " virtual stages; every virtual stage needs at least one layer");
  }
  ModelLayout m;
  m.cfg_ = cfg;
  m.pp_ = pp;
  m.vpp_ = vpp;
  const int64_t V = cfg.vocab, H = cfg.hidden, F = 4 * cfg.hidden;
  const int nv = pp * vpp;
  auto add_unit = [&](Unit::Kind kind, std::string name, int layer, int vstage) {
    m.units_.push_back({kind, std::move(name), layer, vstage, {}});
    return static_cast<int>(m.units_.size() - 1);
  };
  auto add_param = [&](int unit, std::string name, Shape shape, ParamRole role, int layer, int logical,
                       bool shared) {
    m.params_.push_back({std::move(name), std::move(shape), role, layer, unit, logical, shared});
    m.units_[unit].params.push_back(static_cast<int>(m.params_.size() - 1));
  };
  const int emb_logical = add_logical(m.logical_names_, m.logical_shapes_, "embedding.weight", {V, H});
  const int emb_unit = add_unit(Unit::Kind::embedding, "embedding", -1, 0);
  add_param(emb_unit, "embedding.weight", {V, H}, ParamRole::embedding, -1, emb_logical, false);
  for (int l = 0; l < cfg.layers; ++l) {
    // Layers are split contiguously and as evenly as possible over the virtual stages.
    const int vstage = static_cast<int>(static_cast<int64_t>(l) * nv / cfg.layers);
    const int u = add_unit(Unit::Kind::block, "block." + std::to_string(l), l, vstage);
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::pair<const char*, std::pair<Shape, ParamRole>> specs[] = {
        {"ln1.weight", {{H}, ParamRole::ln1_w}},    {"ln1.bias", {{H}, ParamRole::ln1_b}},
        {"fc1.weight", {{F, H}, ParamRole::fc1_w}}, {"fc1.bias", {{F}, ParamRole::fc1_b}},
        {"fc2.weight", {{H, F}, ParamRole::fc2_w}}, {"fc2.bias", {{H}, ParamRole::fc2_b}},
    };
    for (const auto& [suffix, sr] : specs) {
      const int logical = add_logical(m.logical_names_, m.logical_shapes_, p + suffix, sr.first);
      add_param(u, p + suffix, sr.first, sr.second, l, logical, false);
    }
  }
  const int head = add_unit(Unit::Kind::head, "head", -1, nv - 1);
  add_param(head, "final_ln.weight", {H}, ParamRole::lnf_w, -1,
            add_logical(m.logical_names_, m.logical_shapes_, "final_ln.weight", {H}), false);
  add_param(head, "final_ln.bias", {H}, ParamRole::lnf_b, -1,
            add_logical(m.logical_names_, m.logical_shapes_, "final_ln.bias", {H}), false);
  if (!cfg.tied) {
    add_param(head, "output.weight", {V, H}, ParamRole::output, -1,
              add_logical(m.logical_names_, m.logical_shapes_, "output.weight", {V, H}), false);
  } else if (nv > 1 && m.stage_rank(nv - 1) != m.stage_rank(0)) {
    // The last stage holds a copy of the embedding as the tied output weight (marked shared).
    add_param(head, "output.weight (tied copy of embedding.weight)", {V, H}, ParamRole::output, -1,
              emb_logical, true);
  }
  return m;
}

std::vector<int> ModelLayout::units_of(int vstage) const {
  std::vector<int> u;
  for (size_t i = 0; i < units_.size(); ++i) {
    if (units_[i].vstage == vstage) u.push_back(static_cast<int>(i));
  }
  return u;
}

int64_t ModelLayout::num_logical_elements() const {
  int64_t n = 0;
  for (const auto& s : logical_shapes_) n += numel(s);
  return n;
}

std::vector<float> ModelLayout::initial_value(int logical, uint64_t seed) const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  auto& slot = cache_->values[{logical, seed}];
  if (!slot) slot = std::make_shared<const std::vector<float>>(compute_initial_value(logical, seed));
  return *slot;
}

std::vector<float> ModelLayout::compute_initial_value(int logical, uint64_t seed) const {
  const int64_t n = numel(logical_shapes_[logical]);
  const std::string& name = logical_names_[logical];
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (name.find("ln") != std::string::npos && ends_with("weight")) return std::vector<float>(n, 1.0f);
  if (ends_with("bias")) return std::vector<float>(n, 0.0f);
  Rng rng = Rng(seed).split(name);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(0.02 * rng.normal());
  return v;
}

}  // namespace shardcheck::core
