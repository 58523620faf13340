// Everything a training run is configured by: the model, the sharding strategy
// (strategy.hpp), precision, optimizer, batches, the exact-mode grid, and the mutations of
// the bug catalog switched on (mutations.hpp).
//   TrainingConfig c;  c.strategy = Strategy::optim;  c.precision.exact = true;
//   ExactGrid g = exact_grid(dp, c.microbatches, logical_elements);
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/layout/placement.hpp"
#include "core/model/model.hpp"
#include "core/strategies/mutations.hpp"
#include "core/strategies/strategy.hpp"

namespace shardcheck::core {

struct Precision {
  DType param = DType::bf16;  // model weights
  DType main = DType::f32;    // main weights and optimizer state
  DType grad = DType::f32;    // main_grad and reductions
  bool exact = false;         // grid-rounded contributions: every strategy bitwise = reference
};

// The dtype of activations and their gradients: bf16 in mixed precision (bf16 model weights,
// not exact), so the matrix products run bf16 x bf16 with fp32 accumulation; fp32 otherwise.
inline DType activation_dtype(const Precision& p) {
  return p.param == DType::bf16 && !p.exact ? DType::bf16 : DType::f32;
}

struct OptimizerConfig {
  enum class Kind : uint8_t { adam, sgd } kind = Kind::adam;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double clip_grad = 1.0;  // 0: no clipping
};

// Exact mode's grid (docs/semantics.md §3): each contribution is rounded to q = dp*mb*2^-k and
// clamped to `limit` grid steps, chosen from the model size so that every sum of up to
// 2*dp*mb contributions is exact in fp32 and every sum of squares of gradients is exact in
// fp64.
struct ExactGrid {
  double q = 0;
  double limit = 0;  // in units of q
  int k = 0;
};
ExactGrid exact_grid(int dp, int microbatches, int64_t logical_elements);

struct TrainingConfig {
  ModelConfig model;
  Strategy strategy = Strategy::no_shard;
  Precision precision;
  OptimizerConfig optimizer;
  int microbatches = 1;
  int micro_batch_size = 1;
  int steps = 1;
  double gradient_divisor = 0;  // 0: the number of microbatches
  bool unified_comm = false;
  // Communication overlapped with compute as FSDP2 and Megatron do it (streams.overlap): the
  // next unit's all-gather is issued before the current unit's compute, a unit's gradient
  // reduction runs during the next unit's backward with compute's wait one unit later, and
  // DistOpt reduces each bucket as its last gradient lands and waits for each bucket's
  // parameter all-gather at the first forward use.
  bool overlap = false;
  // DistOpt's bucket size in elements with overlap (streams.bucket_size); 0: Megatron's
  // default, max(40M, 1M x dp).
  int64_t bucket_size = 0;
  uint64_t data_seed = 7;
  Mutations mutations;
  double divisor() const { return gradient_divisor > 0 ? gradient_divisor : microbatches; }
};

}  // namespace shardcheck::core
