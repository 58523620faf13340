// The CUDA backend behind the command line.
#include "run/gpu_backend.hpp"

#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>

#include "core/base/byte_codec.hpp"
#include "core/check/training_judge.hpp"
#include "core/scenario/trace_program.hpp"
#include "core/scenario/trace_scenario.hpp"
#include "core/train/trainer.hpp"
#include "mpi/launch.hpp"

namespace shardcheck::run {

namespace {

// An MPI launch: a rank that failed leaves the others waiting inside NCCL, so the whole launch
// ends, with the reason on stderr.
void stop_launch_on_failure(const gpu::GpuOptions& options, const gpu::GpuRunResult& r) {
  if (options.process_rank < 0 || r.completed) return;
  std::fprintf(stderr, "shardcheck: %s\nshardcheck: ending the MPI launch\n", r.error.c_str());
  mpi::abort(3);
}

// An MPI launch: process 0 gets every rank's results and what its judge saw.
void gather_training(int rank, std::vector<core::RankResult>& ranks, core::TrainingJudge* judge) {
  core::ByteWriter w;
  const core::RankResult& mine = ranks.at(static_cast<size_t>(rank));
  w.put<int32_t>(rank);
  w.put<uint64_t>(mine.losses.size());
  for (const auto& l : mine.losses) w.put_vector(l);
  w.put_vector(mine.norms);
  w.put_vector(judge ? judge->export_rank(rank) : std::vector<std::byte>{});
  for (const auto& bytes : mpi::gather(w.bytes())) {
    core::ByteReader r(bytes);
    const int from = r.get<int32_t>();
    if (from == rank) continue;
    core::RankResult& theirs = ranks.at(static_cast<size_t>(from));
    theirs.losses.resize(static_cast<size_t>(r.get<uint64_t>()));
    for (auto& l : theirs.losses) l = r.get_vector<float>();
    theirs.norms = r.get_vector<double>();
    const std::vector<std::byte> seen = r.get_vector<std::byte>();
    if (judge && !seen.empty()) judge->import_rank(seen);
  }
}

}  // namespace

// The shared training run (run/training_run.hpp) on the GPU's world. The judge downloads what
// it captures and holds the weights to the tolerance, not bitwise: the GPU's kernels are not the
// reference's. Its findings carry no seed: a GPU run has no schedule to replay.
GpuTrainingRun run_training_gpu(TrainingState& state, const gpu::GpuOptions& options, bool judge) {
  GpuTrainingRun out;
  std::unique_ptr<core::TrainingJudge> judgement;
  if (judge) {
    const core::ReferenceResult* ref = state.ensure_reference();
    judgement = std::make_unique<core::DownloadingJudge>(state.setup, ref, /*bitwise*/ false);
  }
  JudgedTraining training(state.setup, std::move(judgement), options.ranks);
  gpu::GpuWorld world(options);
  out.result = world.run([&](core::Runtime& rt) { return training.train(rt); });
  stop_launch_on_failure(options, out.result);
  if (options.process_rank >= 0) gather_training(options.process_rank, training.ranks(), training.judge());
  const std::vector<core::RankResult>& ranks = training.ranks();
  const int steps = static_cast<int>(ranks.empty() ? 0 : ranks[0].norms.size());
  out.losses = training.losses(steps);
  out.weights = training.weights(steps);
  if (out.result.completed) training.add_findings(out.findings, /*seed*/ 0);
  if (steps > 0) out.seconds_per_step = out.result.seconds / steps;
  return out;
}

GpuTraceRun run_trace_gpu(const LoadedScenario& s, const gpu::GpuOptions& options) {
  GpuTraceRun out;
  const auto& trace = *s.trace();
  sim::Options so = s.options;
  so.policy = sim::Policy::in_order;
  sim::World ref(so);
  const sim::RunResult expected =
      ref.run([&](core::Runtime& rt) { return core::run_trace_program(rt, trace); });
  // The correctly ordered execution: the same program, each operation finished before the next
  // is issued. (The simulator's in-order run is not: a collective waits there for its peers while
  // its rank's later operations run, so a reuse race's late order is the in-order one.)
  gpu::GpuOptions ordered = options;
  ordered.serial = true;
  ordered.holds.clear();
  ordered.amplify_cycles = 0;
  gpu::GpuWorld serial(ordered);
  const gpu::GpuRunResult in_order =
      serial.run([&](core::Runtime& rt) { return core::run_trace_program(rt, trace); });
  if (!in_order.completed) {
    out.result = in_order;
    out.result.error = "the program-order run failed: " + in_order.error;
    return out;
  }
  gpu::GpuWorld world(options);
  out.result = world.run([&](core::Runtime& rt) { return core::run_trace_program(rt, trace); });
  stop_launch_on_failure(options, out.result);
  if (!out.result.completed || !expected.completed) return out;
  // Only buffers the program writes: one it never writes holds whatever its block held, which
  // depends on which block the allocator handed out, not on the program's order.
  std::set<std::string> written;
  for (const core::TraceStep& t : trace.program) {
    for (const auto& w : t.writes) written.insert(w.buffer);
    if (t.kind == core::TraceStep::Kind::collective) written.insert(t.output.buffer);
    if (t.kind == core::TraceStep::Kind::recv) written.insert(t.buffer);
  }
  for (int r = 0; r < options.ranks; ++r) {
    if (!world.runs_rank(r)) continue;  // another process's (MPI launch)
    for (size_t b = 0; b < ref.lifetimes().size(); ++b) {
      const sim::Lifetime& l = ref.lifetimes()[b];
      if (l.rank != r || !l.live) continue;
      // Buffer ids count a rank's allocations in program order, on both backends.
      int id = 0;
      for (size_t j = 0; j < b; ++j) id += ref.lifetimes()[j].rank == r;
      if (!written.count(ref.name(l.name))) continue;
      const auto want = serial.read(r, id);
      const auto got = world.read(r, id);
      const auto simulated = ref.read(r, id);
      out.simulator_differing +=
          !(simulated.size() == want.size() && std::memcmp(simulated.data(), want.data(), want.size()) == 0);
      ++out.buffers_compared;
      if (want.size() == got.size() && std::memcmp(want.data(), got.data(), want.size()) == 0) continue;
      ++out.buffers_differing;
      if (out.first_difference.empty()) {
        size_t i = 0;
        while (i < std::min(want.size(), got.size()) && want[i] == got[i]) ++i;
        out.first_difference =
            "rank " + std::to_string(r) + " buffer '" + ref.name(l.name) + "' byte " + std::to_string(i);
      }
    }
  }
  if (options.process_rank >=
      0) {  // an MPI launch: the counts over every process, the lowest rank's first difference
    out.buffers_compared = static_cast<int>(mpi::sum(out.buffers_compared));
    out.buffers_differing = static_cast<int>(mpi::sum(out.buffers_differing));
    const std::vector<std::byte> mine(
        reinterpret_cast<const std::byte*>(out.first_difference.data()),
        reinterpret_cast<const std::byte*>(out.first_difference.data()) + out.first_difference.size());
    for (const auto& d : mpi::gather(mine)) {
      if (out.first_difference.empty())
        out.first_difference.assign(reinterpret_cast<const char*>(d.data()), d.size());
    }
  }
  return out;
}

GpuBaseline baseline_for(const LoadedScenario& s, const gpu::GpuOptions& o) {
  GpuBaseline b;
  const TrainingState& st = *s.training();
  if (!st.setup.config.precision.exact) return b;
  TrainingState distopt = st;
  distopt.setup.config.strategy = core::Strategy::distopt;
  distopt.setup.config.mutations = {};
  gpu::GpuOptions plain = o;
  plain.amplify_cycles = 0;
  const GpuTrainingRun r = run_training_gpu(distopt, plain, /*judge*/ true);
  if (!r.result.completed)
    throw std::runtime_error("DistOpt, the baseline, failed on the GPU: " + r.result.error);
  b.bitwise = true;
  b.weights = r.weights;
  b.name = o.comm == gpu::CommMode::nccl ? "DistOpt over NCCL (bitwise, exact mode)"
                                         : "DistOpt on the GPU (bitwise, exact mode)";
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
        std::snprintf(text, sizeof text, "after step %zu, main weight %s[%zu] is %.9g; DistOpt has %.9g",
                      step, st.setup.model->logical_name(static_cast<int>(p)).c_str(), i, got[i], want[i]);
        return text;
      }
    }
  }
  return r.weights.size() == b.weights.size() ? ""
                                              : "the run and DistOpt completed different numbers of steps";
}

}  // namespace shardcheck::run
