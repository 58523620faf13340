// The GPU commands. Everything that needs CUDA sits behind SHARDCHECK_HAVE_GPU.
#include "run/gpu_runs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <variant>

#include "core/base/text.hpp"
#include "run/compare.hpp"
#include "run/exit_code.hpp"
#include "run/scenario_run.hpp"
#include "run/training_run.hpp"
#ifdef SHARDCHECK_HAVE_GPU
#include "gpu/mpi.hpp"
#include "run/gpu_backend.hpp"
#endif

namespace shardcheck::run {

std::vector<RaceSite> race_sites(const std::vector<LoadedScenario>& scenarios) {
  std::vector<RaceSite> sites;
  for (const auto& s : scenarios) {
    const ScenarioOutcome out = run_scenario(s, {});
    for (const auto& f : out.explored.findings) {
      const auto* race = std::get_if<core::RaceDetail>(&f.detail);
      if (f.kind != core::FindingKind::stream_race || !race) continue;
      // Delay the access the program issued first, so that on hardware the other one
      // overtakes it: the order the in-order reference does not have.
      const core::AccessSite& a = race->first.op_id <= race->second.op_id ? race->first : race->second;
      RaceSite site{a.rank, a.stream, a.op, s.name, f.seed};
      if (std::find(sites.begin(), sites.end(), site) == sites.end()) sites.push_back(std::move(site));
    }
  }
  return sites;
}

#ifndef SHARDCHECK_HAVE_GPU

int run_on_gpu(const std::vector<LoadedScenario>&, const GpuArgs&, int) {
  std::cerr << "shardcheck: this build has no GPU backend (nvcc was not found when it was configured)\n";
  return kBadInput;
}
int compare_on_gpu(const LoadedScenario&, const GpuArgs&, const std::string&, int) {
  return run_on_gpu({}, {}, 0);
}

#else

namespace {

// The scenario's rank count and allocator reuse rule (a race through the caching allocator
// reproduces only when the same block is handed out again), and the command line's choices.
bool options(const GpuArgs& a, const sim::Options& scenario, gpu::GpuOptions& o) {
  if (a.backend != "gpu") {
    std::cerr << "shardcheck: --backend is sim or gpu, not '" << a.backend << "'\n";
    return false;
  }
  if (a.comm != "local" && a.comm != "nccl") {
    std::cerr << "shardcheck: --comm is local or nccl, not '" << core::printable(a.comm) << "'\n";
    return false;
  }
  if (!a.alloc.empty() && a.alloc != "caching" && a.alloc != "async") {
    std::cerr << "shardcheck: --alloc is caching or async, not '" << core::printable(a.alloc) << "'\n";
    return false;
  }
  // A machine that cannot run the scenario is the command's input at fault, not shardcheck.
  const int devices = gpu::usable_devices();
  if (devices == 0) {
    std::cerr << "shardcheck: --backend gpu: this machine has no usable CUDA device (the simulator, "
                 "--backend sim, needs none)\n";
    return false;
  }
  if (a.comm == "nccl" && !gpu::mpi_process().launched && scenario.ranks > devices) {
    std::cerr << "shardcheck: --comm nccl runs one rank per GPU: the scenario has " << scenario.ranks
              << " ranks and this machine " << devices
              << " GPUs (--comm local runs them all on one GPU, an MPI launch spreads them over hosts)\n";
    return false;
  }
  o.ranks = scenario.ranks;
  o.reuse = scenario.reuse == sim::Reuse::earliest ? core::PoolReuse::earliest : core::PoolReuse::best_fit;
  o.comm = a.comm == "nccl" ? gpu::CommMode::nccl : gpu::CommMode::local;
  const bool async =
      a.alloc.empty() ? scenario.allocator == sim::AllocatorModel::stream_ordered : a.alloc == "async";
  o.alloc = async ? gpu::AllocMode::async : gpu::AllocMode::caching;
  if (a.amplify_at != "collectives" && a.amplify_at != "race") {
    std::cerr << "shardcheck: --amplify-at is collectives or race, not '" << core::printable(a.amplify_at)
              << "'\n";
    return false;
  }
  o.amplify_cycles = a.amplify;
  o.amplify_at = a.amplify_at == "race" ? gpu::AmplifyAt::sites : gpu::AmplifyAt::collectives;
  if (const gpu::MpiProcess& p = gpu::mpi_process(); p.launched) {
    // One rank per process: the launch's size is the scenario's rank count.
    if (o.comm != gpu::CommMode::nccl || p.size != o.ranks) {
      std::cerr << "shardcheck: under an MPI launch each process runs one rank over NCCL: pass --comm nccl "
                   "and start as many processes as the "
                   "scenario has ranks ("
                << o.ranks << "; this launch has " << p.size << ")\n";
      return false;
    }
    o.process_rank = p.rank;
    o.process_device = p.local_rank % devices;
  }
  return true;
}

// Under an MPI launch every process runs the same commands in step and process 0 alone
// prints; the exit code is process 0's.
void quiet_unless_first_process() {
  if (const gpu::MpiProcess& p = gpu::mpi_process(); p.launched && p.rank != 0) {
    if (!std::freopen("/dev/null", "w", stdout)) std::perror("shardcheck: /dev/null");
  }
}
int first_process_code(int code) {
  const gpu::MpiProcess& p = gpu::mpi_process();
  return p.launched ? static_cast<int>(gpu::mpi_sum(p.rank == 0 ? code : 0)) : code;
}

// Race replay on hardware: how many of `runs` end with values that differ from a
// correctly ordered execution; training runs also report what the judge found.
int run_one(const LoadedScenario& s, const gpu::GpuOptions& o, int runs) {
  int differing = 0, faults = 0, errors = 0;  // faults: the program stopped the run (see gpu::ProgramFault)
  int64_t delays = 0;
  std::string example;
  std::vector<std::string> also;  // findings that are not a difference in values
  const GpuBaseline baseline = s.training ? baseline_for(s, o) : GpuBaseline{};
  for (int i = 0; i < runs; ++i) {
    if (s.training) {
      GpuTrainingRun r = run_training_gpu(*s.training, o, /*judge*/ true);
      delays += r.result.delays;
      if (!r.result.completed) {
        ++(r.result.program_fault ? faults : errors);
        if (example.empty()) example = r.result.error;
        continue;
      }
      std::string difference = baseline.bitwise ? first_weight_difference(*s.training, r, baseline) : "";
      for (const auto& f : r.findings) {
        if (f.kind == core::FindingKind::numerics_divergence ||
            f.kind == core::FindingKind::replica_divergence) {
          if (difference.empty()) difference = f.summary;
          continue;
        }
        const std::string line = std::string(core::to_string(f.kind)) + ": " + f.summary;
        if (std::find(also.begin(), also.end(), line) == also.end()) also.push_back(line);
      }
      differing += !difference.empty();
      if (example.empty()) example = difference;
    } else {
      GpuTraceRun r = run_trace_gpu(s, o);
      delays += r.result.delays;
      if (!r.result.completed) {
        ++(r.result.program_fault ? faults : errors);
        if (example.empty()) example = r.result.error;
        continue;
      }
      differing += r.buffers_differing > 0;
      if (example.empty()) example = r.first_difference;
    }
  }
  std::printf("%-40s %d of %d runs differ from %s%s%s\n", s.name.c_str(), differing, runs,
              s.training ? baseline.name.c_str() : "the simulator's in-order values",
              faults ? (", " + std::to_string(faults) + " stopped by the program").c_str() : "",
              errors ? " (with errors)" : "");
  if (!example.empty()) std::printf("  first: %s\n", example.c_str());
  for (const auto& line : also) std::printf("  also found: %s\n", line.c_str());
  if (o.process_rank >= 0) delays = gpu::mpi_sum(delays);
  if (o.amplify_cycles > 0)
    std::printf("  delays: %.1f spins of %lld cycles a run\n", static_cast<double>(delays) / runs,
                static_cast<long long>(o.amplify_cycles));
  return errors ? kInternalError : kOk;
}

int run_all(const std::vector<LoadedScenario>& scenarios, const GpuArgs& a, int runs) {
  int code = kOk;
  std::vector<gpu::DelaySite> sites;
  if (a.amplify_at == "race") {
    const std::vector<RaceSite> found = race_sites(scenarios);
    std::printf("the simulator's races give %zu operation%s to delay, in every file:\n", found.size(),
                found.size() == 1 ? "" : "s");
    for (const auto& f : found) {
      std::printf("  rank %d '%s' %s (%s, seed %llu)\n", f.rank, f.stream.c_str(), f.op.c_str(),
                  f.scenario.c_str(), static_cast<unsigned long long>(f.seed));
      sites.push_back({f.rank, f.stream, f.op});
    }
    if (a.amplify <= 0) std::printf("  (nothing is delayed: --amplify is 0)\n");
  }
  for (const auto& s : scenarios) {
    gpu::GpuOptions o;
    if (!options(a, s.options, o)) return kBadInput;
    o.delay_sites = sites;
    try {
      code = std::max(code, run_one(s, o, runs));
    } catch (const std::exception& e) {
      std::cerr << "shardcheck: " << e.what() << "\n";
      return kInternalError;
    }
  }
  return code;
}

int compare_one(const LoadedScenario& s, const GpuArgs& a, const std::string& against, int steps) {
  gpu::GpuOptions o;
  if (!options(a, s.options, o)) return kBadInput;
  TrainingState& st = *s.training;
  if (steps > 0) st.setup.config.steps = steps;
  try {
    const GpuTrainingRun ours = run_training_gpu(st, o, /*judge*/ true);
    if (!ours.result.completed) throw std::runtime_error(ours.result.error);
    std::vector<double> theirs;
    std::vector<std::vector<std::vector<float> > > theirs_w;
    if (against == "distopt") {
      TrainingState other = st;
      other.setup.config.strategy = core::Strategy::distopt;
      other.setup.config.mutations = {};
      const GpuTrainingRun base = run_training_gpu(other, o, true);
      if (!base.result.completed) throw std::runtime_error(base.result.error);
      theirs = base.losses;
      theirs_w = base.weights;
    } else if (against == "sim") {
      const TrainingRun base = run_training(st, options_for(s, {}).value());
      theirs = base.losses;
      theirs_w = base.weights;
    } else {
      st.reference.reset();
      for (const auto& step : st.ensure_reference()->steps) {
        theirs.push_back(step.loss);
        theirs_w.push_back(step.main);
      }
    }
    std::printf("compare %s (%s) on the GPU against %s: %zu steps, %.3f ms per step\n\n",
                std::string(core::to_string(st.setup.config.strategy)).c_str(), s.name.c_str(),
                against.c_str(), ours.losses.size(), 1e3 * ours.seconds_per_step);
    double max_abs = 0, max_rel = 0;
    std::printf("%-6s %-18s %-18s %s\n", "step", "gpu", against.c_str(), "|delta|");
    for (size_t i = 0; i < ours.losses.size() && i < theirs.size(); ++i) {
      const double d = std::fabs(ours.losses[i] - theirs[i]);
      max_abs = std::max(max_abs, d);
      max_rel = std::max(max_rel, d / std::max(std::fabs(theirs[i]), 1e-30));
      if (i < 20 || i + 5 >= ours.losses.size())
        std::printf("%-6zu %-18.9g %-18.9g %.3g\n", i, ours.losses[i], theirs[i], d);
    }
    bool bitwise = ours.weights.size() == theirs_w.size();
    for (size_t i = 0; bitwise && i < ours.weights.size(); ++i) bitwise = ours.weights[i] == theirs_w[i];
    std::printf("\nmax |delta loss| = %.3g (relative %.3g)\nweights bitwise equal after every step: %s\n",
                max_abs, max_rel, bitwise ? "yes" : "no");
    return kOk;
  } catch (const std::exception& e) {
    std::cerr << "shardcheck compare: " << e.what() << "\n";
    return kInternalError;
  }
}

}  // namespace

// Under an MPI launch an internal error on one process ends the launch: the others would
// wait for it inside NCCL or MPI.
int in_step(int code) {
  if (code == kInternalError && gpu::mpi_process().launched) gpu::mpi_abort(kInternalError);
  return first_process_code(code);
}

int run_on_gpu(const std::vector<LoadedScenario>& scenarios, const GpuArgs& a, int runs) {
  quiet_unless_first_process();
  return in_step(run_all(scenarios, a, runs));
}

int compare_on_gpu(const LoadedScenario& s, const GpuArgs& a, const std::string& against, int steps) {
  quiet_unless_first_process();
  if (auto why = compare_steps_problem(s, against, steps); !why.empty()) {
    std::cerr << "shardcheck compare: " << core::printable(why) << "\n";
    return kBadInput;
  }
  return in_step(compare_one(s, a, against, steps));
}

#endif

}  // namespace shardcheck::run
