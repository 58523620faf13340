// The CUDA backend behind the command line.
#include "cli/gpu_backend.hpp"

#include <cstring>

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

}  // namespace shardcheck::cli
