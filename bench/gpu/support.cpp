#include "bench/gpu/support.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "core/train/trainer.hpp"

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

namespace {

// Host time at each rank's step end. The trainer synchronizes the device before it calls the
// observer, so a step's end is when its device work is done. Each rank writes only its own
// row (NCCL mode drives ranks on their own threads).
class StepClock final : public core::Observer {
 public:
  explicit StepClock(int ranks) : marks_(static_cast<size_t>(ranks)) {}
  core::Task<> on_initialized(core::Runtime& rt, const core::RankView&) override {
    marks_[rt.rank()].push_back(now());
    co_return;
  }
  core::Task<> on_step_end(core::Runtime& rt, int, const core::RankView&, double,
                           const core::NormPlan&) override {
    marks_[rt.rank()].push_back(now());
    co_return;
  }
  // Step s lasts from the last rank's end of step s-1 (or of initialization) to the last
  // rank's end of step s.
  std::vector<double> step_seconds() const {
    size_t n = marks_.empty() ? 0 : marks_[0].size();
    for (const auto& m : marks_) n = std::min(n, m.size());
    std::vector<double> last(n, 0), out;
    for (size_t i = 0; i < n; ++i) {
      for (const auto& m : marks_) last[i] = std::max(last[i], m[i]);
    }
    for (size_t i = 1; i < n; ++i) out.push_back(last[i] - last[i - 1]);
    return out;
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  std::vector<std::vector<double>> marks_;
};

}  // namespace

Timed train(core::TrainingConfig c, const std::vector<core::Axis>& axes, int steps, gpu::GpuOptions options) {
  c.steps = steps;
  auto mesh = std::make_shared<const core::Mesh>(core::Mesh::create(axes).value());
  auto setup = core::make_training_setup(c, mesh);
  if (!setup) throw std::runtime_error(setup.error().message());
  options.ranks = mesh->world_size();
  std::vector<core::RankResult> ranks(static_cast<size_t>(options.ranks));
  gpu::GpuWorld w(options);
  StepClock clock(options.ranks);
  const gpu::GpuRunResult r =
      w.run([&](core::Runtime& rt) { return core::train_rank(rt, *setup, &clock, &ranks[rt.rank()]); });
  if (!r.completed) throw std::runtime_error(r.error);
  Timed t;
  t.seconds = r.seconds;
  t.step_seconds = clock.step_seconds();
  t.losses = core::mean_losses(ranks, steps);
  if (options.profile_kernels) t.profile = w.kernel_profile();
  if (options.record_collectives) t.collectives = w.collectives(0);
  return t;
}

StepTime step_time(const core::TrainingConfig& c, const std::vector<core::Axis>& axes,
                   const gpu::GpuOptions& options, int steps) {
  // The first two steps make the communicators and fill the caching allocator.
  std::vector<double> s = train(c, axes, steps + 2, options).step_seconds;
  if (s.size() < 3) throw std::runtime_error("step_time: too few steps timed");
  s.erase(s.begin(), s.begin() + 2);
  std::sort(s.begin(), s.end());
  return {s[s.size() / 2], s.front(), s.back()};
}

double step_seconds(const core::TrainingConfig& c, const std::vector<core::Axis>& axes,
                    const gpu::GpuOptions& options, int steps) {
  return step_time(c, axes, options, steps).median;
}

double max_abs_delta(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace shardcheck::bench
