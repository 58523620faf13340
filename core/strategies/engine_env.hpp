// What every engine of one rank is built from: the runtime, the model and config, the mesh
// and this rank's place in it, its streams, and the model units it runs.
#pragma once

#include <memory>
#include <vector>

#include "core/layout/mesh.hpp"
#include "core/model/model.hpp"
#include "core/strategies/engine.hpp"
#include "core/strategies/training_config.hpp"

namespace shardcheck::core {

struct EngineEnv {
  Runtime* rt = nullptr;
  const ModelLayout* model = nullptr;
  const TrainingConfig* config = nullptr;
  std::shared_ptr<const Mesh> mesh;
  Streams streams;
  int rank = 0;
  std::vector<int> units;  // this rank's units, in registration order (optimizer order)

  Runtime& runtime() const { return *rt; }
  int pp() const { return mesh->size_or_one("pp"); }
  int pp_rank() const;
  std::vector<int> dp_axes() const;  // [dp] or [dp_outer, dp_inner]
  int dp_size() const;
  int dp_rank() const;  // row-major over the dp axes
  int chunk_of(int unit) const { return model->stage_chunk(model->units()[unit].vstage); }
};

// The units a pipeline rank runs, across all its chunks, in registration order.
std::vector<int> units_of_rank(const ModelLayout& model, int pp_rank);

}  // namespace shardcheck::core
