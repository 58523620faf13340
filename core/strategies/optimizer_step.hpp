// The optimizer step every engine takes — gradient norm, clip coefficient, Adam or SGD, cast
// back — written once. Exact mode (docs/semantics.md §3) needs the FSDP strategies, DistOpt
// and the single-rank reference to issue the same elementwise work, so they share this code
// and supply only what differs: the pieces a rank counts in the norm and the pieces it
// updates, how the norm is reduced across ranks, where the scalars live, the stream, the
// kernel names and when to cast back. The clip coefficient is computed on device, so the step
// needs no host sync (docs/semantics.md §7); only the reference asks for its norm on the host.
//   GradNorm n{.stream = compute, .terms = terms, .reduce_group = world,
//              .sumsq = DeviceScalar::scratch("grad.sumsq"), .coef = coef,
//              .norm = DeviceScalar::kept(norm), .max_norm = config.optimizer.clip_grad};
//   ParamUpdate u{.stream = compute, .optimizer = config.optimizer, .step = step, .coef = coef,
//                 .pieces = pieces, .cast = CastBack::after_each_update};
//   co_await optimizer_step(rt, n, u);
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/model/model.hpp"
#include "core/runtime/runtime.hpp"
#include "core/strategies/mutations.hpp"
#include "core/strategies/training_config.hpp"

namespace shardcheck::core {

// An f64[1] on device that the norm computation writes: one the engine keeps, or scratch the
// step allocates on its stream when it first needs it and frees once it has used it.
struct DeviceScalar {
  BufferId kept_buffer = -1;
  std::string scratch_name;  // when kept_buffer < 0

  static DeviceScalar kept(BufferId b) { return {b, ""}; }
  static DeviceScalar scratch(std::string name) { return {-1, std::move(name)}; }
};

// One gradient range whose squares the norm sums.
struct NormTerm {
  TensorRef grad;
  std::string name;  // the sum_squares kernel's
};

// The gradient norm and the clip coefficient: sum_squares over `terms` into the sum of
// squares, an all-reduce of it across `reduce_group`, then clip_coef writes the coefficient
// and the norm.
struct GradNorm {
  StreamId stream = -1;
  // In issue order. The engine picks them so that every logical element counts once across
  // the world: replicas and the tied output copy are left out (see counts_in_norm).
  std::vector<NormTerm> terms;
  // Sum-all-reduce of the sum of squares ("grad_norm"); -1 when one rank holds every term.
  GroupId reduce_group = -1;
  // The engines differ here, and each keeps its allocation order: the strategies take the sum
  // of squares as scratch and keep the norm for norm_value(); the reference keeps its sum of
  // squares and takes the norm as scratch.
  DeviceScalar sumsq;  // a scratch one is allocated first and freed last
  BufferId coef = -1;  // f64[1], read by the update
  DeviceScalar norm;   // a scratch one is allocated just before clip_coef
  double max_norm = 0.0;
  // Divides each term's gradient in place by this just before its sum of squares (kernel
  // "divide"): the reference's average over data-parallel ranks, which a strategy's
  // reduction has already applied. The reference has always issued the divides interleaved
  // with the sums of squares, and keeps that order.
  std::optional<double> divide_first;
  double* norm_host = nullptr;  // when set, the norm is downloaded here (a host sync)
};

// How main weights get back into the model weights the next forward reads.
enum class CastBack : uint8_t {
  none,               // the engine casts on its own (FSDP: on the AG stream, after the step)
  after_each_update,  // each piece right after its update (DistOpt)
  after_all_updates,  // every piece, in piece order, once all are updated (the reference)
};

// A range of main weights one rank updates, with its gradient and Adam moments.
struct UpdatePiece {
  TensorRef main;  // fp32, updated in place
  TensorRef grad;
  TensorRef adam_m, adam_v;        // unused by SGD
  std::string name;                // the update kernel's (update_kernel() names the kind)
  std::optional<TensorRef> model;  // the cast's target, when the step casts back
  std::string cast_name = "copy";
};

// Adam or SGD over `pieces` in order, each scaled by the clip coefficient when clipping is
// on, then the casts back as `cast` says.
struct ParamUpdate {
  StreamId stream = -1;
  OptimizerConfig optimizer;
  int step = 0;  // 0-based; Adam's bias correction counts from 1
  BufferId coef = -1;
  std::vector<UpdatePiece> pieces;
  CastBack cast = CastBack::none;
};

// "adam" or "sgd": the stem of every engine's update kernel names.
std::string_view update_kernel(OptimizerConfig::Kind kind);
// Whether a parameter's gradient counts in the norm: the tied output copy on the last
// pipeline stage is the embedding counted a second time, unless the
// tied_grad_norm_double_count catalog bug counts it anyway.
bool counts_in_norm(const ParamSpec& p, const Mutations& m);

// The tasks start when awaited and read their arguments until they finish: keep them alive.
Task<> grad_norm(Runtime& rt, const GradNorm& n);
Task<> update_params(Runtime& rt, const ParamUpdate& u);
// The whole step: the norm and clip coefficient, then the update and casts.
Task<> optimizer_step(Runtime& rt, const GradNorm& n, const ParamUpdate& u);

}  // namespace shardcheck::core
