#include "bench/gpu/support.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/trainer.hpp"

namespace shardcheck::bench {

core::TrainingConfig tinylm_config(core::Strategy s) {
  core::TrainingConfig c;
  c.model = {8192, 1024, 8, 1024, true, 1234};
  c.strategy = s;
  c.precision.param = core::DType::bf16;
  c.microbatches = 4;
  c.micro_batch_size = 2;
  c.optimizer.lr = 3e-4;
  return c;
}

std::vector<core::Axis> mesh_for(core::Strategy s, int ranks) {
  if (core::is_two_dimensional(s)) return {{"dp_outer", 2}, {"dp_inner", ranks / 2}};
  return {{"dp", ranks}};
}

Timed train(core::TrainingConfig c, const std::vector<core::Axis>& axes, int steps, gpu::GpuOptions options) {
  c.steps = steps;
  auto mesh = std::make_shared<const core::Mesh>(core::Mesh::create(axes).value());
  auto setup = core::make_training_setup(c, mesh);
  if (!setup) throw std::runtime_error(setup.error().message());
  options.ranks = mesh->world_size();
  std::vector<core::RankResult> ranks(static_cast<size_t>(options.ranks));
  gpu::GpuWorld w(options);
  const gpu::GpuRunResult r = w.run([&](core::Runtime& rt) { return core::train_rank(rt, *setup, nullptr, &ranks[rt.rank()]); });
  if (!r.completed) throw std::runtime_error(r.error);
  Timed t;
  t.seconds = r.seconds;
  t.losses = core::mean_losses(ranks, steps);
  if (options.profile_kernels) t.profile = w.kernel_profile();
  if (options.record_collectives) t.collectives = w.collectives(0);
  return t;
}

double step_seconds(const core::TrainingConfig& c, const std::vector<core::Axis>& axes, const gpu::GpuOptions& options) {
  const double a = train(c, axes, 2, options).seconds, b = train(c, axes, 7, options).seconds;
  return (b - a) / 5;
}

double max_abs_delta(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace shardcheck::bench
