// The CUDA backend behind the command line.
#include "cli/gpu_backend.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "core/trace_program.hpp"
#include "core/trainer.hpp"
#include "core/trace_scenario.hpp"
#include "core/training_judge.hpp"

namespace shardcheck::cli {

GpuTrainingRun run_training_gpu(TrainingState& state, const gpu::GpuOptions& options, bool judge) {
  GpuTrainingRun out;
  const core::ReferenceResult* ref = judge ? state.ensure_reference() : nullptr;
  core::DownloadingJudge judgement(state.setup, ref, /*bitwise*/ false);
  std::vector<core::RankResult> ranks(static_cast<size_t>(options.ranks));
  gpu::GpuWorld world(options);
  out.result = world.run([&](core::Runtime& rt) {
    return core::train_rank(rt, state.setup, judge ? &judgement : nullptr, &ranks[rt.rank()]);
  });
  const int steps = static_cast<int>(ranks.empty() ? 0 : ranks[0].norms.size());
  out.losses = core::mean_losses(ranks, steps);
  for (int step = 0; judge && step < steps; ++step) out.weights.push_back(judgement.logical_main(step));
  if (judge && out.result.completed) out.findings = judgement.judge();
  if (steps > 0) out.seconds_per_step = out.result.seconds / steps;
  return out;
}

GpuTraceRun run_trace_gpu(const LoadedScenario& s, const gpu::GpuOptions& options) {
  GpuTraceRun out;
  const auto& trace = *std::static_pointer_cast<const core::TraceScenario>(s.keep);
  sim::Options so = s.options;
  so.policy = sim::Policy::in_order;
  sim::World ref(so);
  const sim::RunResult expected = ref.run([&](core::Runtime& rt) { return core::run_trace_program(rt, trace); });
  gpu::GpuWorld world(options);
  out.result = world.run([&](core::Runtime& rt) { return core::run_trace_program(rt, trace); });
  if (!out.result.completed || !expected.completed) return out;
  for (int r = 0; r < options.ranks; ++r) {
    for (size_t b = 0; b < ref.lifetimes().size(); ++b) {
      const sim::Lifetime& l = ref.lifetimes()[b];
      if (l.rank != r || !l.live) continue;
      // Buffer ids count a rank's allocations in program order, on both backends.
      int id = 0;
      for (size_t j = 0; j < b; ++j) id += ref.lifetimes()[j].rank == r;
      const auto want = ref.read(r, id);
      const auto got = world.read(r, id);
      ++out.buffers_compared;
      if (want.size() == got.size() && std::memcmp(want.data(), got.data(), want.size()) == 0) continue;
      ++out.buffers_differing;
      if (out.first_difference.empty()) {
        size_t i = 0;
        while (i < std::min(want.size(), got.size()) && want[i] == got[i]) ++i;
        out.first_difference = "rank " + std::to_string(r) + " buffer '" + ref.name(l.name) + "' byte " + std::to_string(i);
      }
    }
  }
  return out;
}

GpuBaseline baseline_for(const LoadedScenario& s, const gpu::GpuOptions& o) {
  GpuBaseline b;
  const TrainingState& st = *s.training;
  if (!st.setup.config.precision.exact || o.comm != gpu::CommMode::local) return b;
  TrainingState distopt = st;
  distopt.setup.config.strategy = core::Strategy::distopt;
  distopt.setup.config.mutations = {};
  gpu::GpuOptions plain = o;
  plain.amplify_cycles = 0;
  const GpuTrainingRun r = run_training_gpu(distopt, plain, /*judge*/ true);
  if (!r.result.completed) throw std::runtime_error("DistOpt, the baseline, failed on the GPU: " + r.result.error);
  b.bitwise = true;
  b.weights = r.weights;
  b.name = "DistOpt on the GPU (bitwise, exact mode)";
  return b;
}

// The first main weight that differs from the baseline's, or "".
std::string first_weight_difference(const TrainingState& st, const GpuTrainingRun& r, const GpuBaseline& b) {
  for (size_t step = 0; step < r.weights.size() && step < b.weights.size(); ++step) {
    for (size_t p = 0; p < r.weights[step].size() && p < b.weights[step].size(); ++p) {
      const auto& got = r.weights[step][p];
      const auto& want = b.weights[step][p];
      for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
        if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
        char text[512];
        std::snprintf(text, sizeof text, "after step %zu, main weight %s[%zu] is %.9g; DistOpt has %.9g", step,
                      st.setup.model->logical_name(static_cast<int>(p)).c_str(), i, got[i], want[i]);
        return text;
      }
    }
  }
  return r.weights.size() == b.weights.size() ? "" : "the run and DistOpt completed different numbers of steps";
}

}  // namespace shardcheck::cli
