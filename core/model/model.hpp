// TinyLM (docs/semantics.md §3): an embedding V x H tied with the output projection, L blocks of
// LayerNorm -> Linear(H,4H) -> GELU -> Linear(4H,H) with a residual, a final LayerNorm and
// softmax cross-entropy. This file describes its parameters, how they fall into FSDP units
// (the modules that own parameter groups), and how units are placed on pipeline stages.
//   ModelConfig cfg{.vocab = 64, .hidden = 16, .layers = 4, .seq = 8, .tied = true};
//   ModelLayout m = ModelLayout::create(cfg, /*pp*/ 2, /*vpp*/ 1).value();
//   m.units_of(stage)  ->  the units a pipeline stage (or virtual stage) owns
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/rng.hpp"
#include "core/base/status.hpp"
#include "core/layout/layout.hpp"

namespace shardcheck::core {

struct ModelConfig {
  int64_t vocab = 64;
  int64_t hidden = 16;
  int64_t layers = 4;
  int64_t seq = 8;
  bool tied = true;
  uint64_t init_seed = 1234;
};

enum class ParamRole : uint8_t { embedding, ln1_w, ln1_b, fc1_w, fc1_b, fc2_w, fc2_b, lnf_w, lnf_b, output };

struct ParamSpec {
  std::string name;  // "layers.1.fc1.weight"
  Shape shape;
  ParamRole role = ParamRole::embedding;
  int layer = -1;       // block index for block parameters
  int unit = 0;         // the FSDP unit that owns it
  int logical = 0;      // index of the logical parameter (a tied copy shares the embedding's)
  bool shared = false;  // the tied output copy on the last pipeline stage: excluded from norms
};

// An FSDP unit: the module whose parameters form one parameter group (all TinyLM parameters
// share dtype and requires_grad, so each unit has one group).
struct Unit {
  enum class Kind : uint8_t { embedding, block, head };
  Kind kind = Kind::block;
  std::string name;         // "embedding", "block.2", "head"
  int layer = -1;           // for blocks
  int vstage = 0;           // virtual pipeline stage that runs it
  std::vector<int> params;  // indices into ModelLayout::params(), registration order
};

class ModelLayout {
 public:
  static constexpr int64_t kMaxDim = 1 << 16;
  static constexpr int64_t kMaxLayers = 256;

  // pp pipeline stages, vpp model chunks per stage: pp * vpp virtual stages in all.
  static Expected<ModelLayout> create(const ModelConfig& cfg, int pp, int vpp);

  const ModelConfig& config() const { return cfg_; }
  int pp() const { return pp_; }
  int vpp() const { return vpp_; }
  int virtual_stages() const { return pp_ * vpp_; }
  // Pipeline rank and chunk of a virtual stage (Megatron's interleaving: v = chunk * pp + rank).
  int stage_rank(int vstage) const { return vstage % pp_; }
  int stage_chunk(int vstage) const { return vstage / pp_; }
  int vstage_of(int pp_rank, int chunk) const { return chunk * pp_ + pp_rank; }

  const std::vector<ParamSpec>& params() const { return params_; }
  const std::vector<Unit>& units() const { return units_; }
  std::vector<int> units_of(int vstage) const;
  // Logical parameters (a tied copy is not one): names and shapes, registration order.
  int num_logical() const { return static_cast<int>(logical_names_.size()); }
  const std::string& logical_name(int i) const { return logical_names_[i]; }
  const Shape& logical_shape(int i) const { return logical_shapes_[i]; }
  int64_t num_logical_elements() const;

  // The deterministic initial value of a logical parameter (the same on every rank):
  // LayerNorm weights 1, biases 0, matrices and the embedding N(0, 0.02^2) from init_seed.
  std::vector<float> initial_value(int logical) const { return initial_value(logical, cfg_.init_seed); }
  // The same from another seed (used to model ranks that initialize independently).
  // Computed once per (logical, seed) and layout: every rank of a run shares the values.
  std::vector<float> initial_value(int logical, uint64_t seed) const;

 private:
  std::vector<float> compute_initial_value(int logical, uint64_t seed) const;

  ModelConfig cfg_;
  int pp_ = 1, vpp_ = 1;
  std::vector<ParamSpec> params_;
  std::vector<Unit> units_;
  std::vector<std::string> logical_names_;
  std::vector<Shape> logical_shapes_;
  struct Cache {
    std::mutex mu;  // ranks may initialize from several threads
    std::map<std::pair<int, uint64_t>, std::shared_ptr<const std::vector<float>>> values;
  };
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
};

}  // namespace shardcheck::core
