// The GPU backend's commands: `run --backend gpu` and `compare --backend gpu`, on one process
// or one rank per process under an MPI launch. Linked into `shardcheck-gpu` only, which
// installs them (run/backends.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <variant>

#include "core/base/text.hpp"
#include "mpi/launch.hpp"
#include "run/compare.hpp"
#include "run/exit_code.hpp"
#include "run/gpu_backend.hpp"
#include "run/gpu_runs.hpp"
#include "run/install_backends.hpp"
#include "run/scenario_run.hpp"
#include "run/training_run.hpp"

namespace shardcheck::run {

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
  if (a.comm == "nccl" && !mpi::process().launched && scenario.ranks > devices) {
    std::cerr << "shardcheck: --comm nccl runs one rank per GPU: the scenario has " << scenario.ranks
              << " ranks and this machine " << devices
              << " GPUs (--comm local runs them all on one GPU, an MPI launch spreads them over hosts)\n";
    return false;
  }
  o.ranks = scenario.ranks;
  o.reuse = scenario.reuse;
  o.comm = a.comm == "nccl" ? gpu::CommMode::nccl : gpu::CommMode::local;
  const bool async =
      a.alloc.empty() ? scenario.allocator == core::Allocator::stream_ordered : a.alloc == "async";
  o.alloc = async ? core::Allocator::stream_ordered : core::Allocator::caching;
  if (a.amplify_at != "collectives" && a.amplify_at != "race") {
    std::cerr << "shardcheck: --amplify-at is collectives or race, not '" << core::printable(a.amplify_at)
              << "'\n";
    return false;
  }
  o.amplify_cycles = a.amplify;
  if (a.force_race && (o.comm != gpu::CommMode::local || mpi::process().launched)) {
    std::cerr
        << "shardcheck: --force-race runs on the device-local communicator (--comm local, one process)\n";
    return false;
  }
  if (a.force_race && !(a.hold_deadline > 0 && a.hold_deadline <= 3600)) {
    std::cerr << "shardcheck: --hold-deadline is between 0 and 3600 seconds\n";
    return false;
  }
  o.amplify_at = a.amplify_at == "race" ? gpu::AmplifyAt::sites : gpu::AmplifyAt::collectives;
  if (const mpi::Process& p = mpi::process(); p.launched) {
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
  if (const mpi::Process& p = mpi::process(); p.launched && p.rank != 0) {
    if (!std::freopen("/dev/null", "w", stdout)) std::perror("shardcheck: /dev/null");
  }
}
int first_process_code(int code) {
  const mpi::Process& p = mpi::process();
  return p.launched ? static_cast<int>(mpi::sum(p.rank == 0 ? code : 0)) : code;
}

// What one file's runs on hardware showed, and its verdict against the file's `expect:`.
struct GpuTally {
  int runs = 0, differing = 0, faults = 0, errors = 0;  // faults: the program stopped the run
  int64_t delays = 0;
  std::string example;
  std::vector<std::string> also;  // findings that are not a difference in values
  std::map<gpu::HoldOutcome::How, int> holds;
  int forced = 0;        // runs with a hold released by its second access
  std::string ordering;  // the first ordering that released a hold
};

// Race replay on hardware: how many of `runs` end with values that differ from a
// correctly ordered execution; training runs also report what the judge found.
GpuTally run_one(const LoadedScenario& s, const gpu::GpuOptions& o, int runs) {
  GpuTally t;
  t.runs = runs;
  const GpuBaseline baseline = s.training() ? baseline_for(s, o) : GpuBaseline{};
  auto tally_holds = [&](const gpu::GpuRunResult& r) {
    bool any = false;
    for (const auto& h : r.holds) any |= h.how == gpu::HoldOutcome::How::second_access;
    t.forced += any;
    for (const auto& h : r.holds) {
      ++t.holds[h.how];
      if (h.how == gpu::HoldOutcome::How::ordering && t.ordering.empty()) t.ordering = h.why;
    }
  };
  // Counts a run's delays and holds; false (counted as a fault or an error) when it did not finish.
  auto completed = [&](const gpu::GpuRunResult& r) {
    t.delays += r.delays;
    tally_holds(r);
    if (r.completed) return true;
    ++(r.program_fault ? t.faults : t.errors);
    if (t.example.empty()) t.example = r.error;
    return false;
  };
  for (int i = 0; i < runs; ++i) {
    if (s.training()) {
      GpuTrainingRun r = run_training_gpu(*s.training(), o, /*judge*/ true);
      if (!completed(r.result)) continue;
      std::string difference = baseline.bitwise ? first_weight_difference(*s.training(), r, baseline) : "";
      for (const auto& f : r.findings) {
        if (core::info(f.kind).shows_in_values) {  // the judge's differences in values
          if (difference.empty()) difference = f.summary;
          continue;
        }
        const std::string line = std::string(core::to_string(f.kind)) + ": " + f.summary;
        if (std::find(t.also.begin(), t.also.end(), line) == t.also.end()) t.also.push_back(line);
      }
      t.differing += !difference.empty();
      if (t.example.empty()) t.example = difference;
    } else {
      GpuTraceRun r = run_trace_gpu(s, o);
      if (!completed(r.result)) continue;
      t.differing += r.buffers_differing > 0;
      if (t.example.empty()) t.example = r.first_difference;
    }
  }
  std::printf("%-40s %d of %d runs differ from %s%s%s\n", s.name.c_str(), t.differing, runs,
              s.training() ? baseline.name.c_str() : "the program-order run",
              t.faults ? (", " + std::to_string(t.faults) + " stopped by the program").c_str() : "",
              t.errors ? " (with errors)" : "");
  if (!t.example.empty()) std::printf("  first: %s\n", t.example.c_str());
  for (const auto& line : t.also) std::printf("  also found: %s\n", line.c_str());
  if (o.process_rank >= 0) t.delays = mpi::sum(t.delays);
  if (o.amplify_cycles > 0)
    std::printf("  delays: %.1f spins of %lld cycles a run\n", static_cast<double>(t.delays) / runs,
                static_cast<long long>(o.amplify_cycles));
  if (!o.holds.empty()) {
    int total = 0;
    for (const auto& [how, n] : t.holds) total += n;
    std::string parts;
    for (const auto& [how, n] : t.holds) {
      if (how == gpu::HoldOutcome::How::not_reached) continue;
      parts +=
          std::string(parts.empty() ? "" : ", ") + std::to_string(n) + " released " + gpu::to_string(how);
    }
    const int unreached = t.holds.count(gpu::HoldOutcome::How::not_reached)
                              ? t.holds.at(gpu::HoldOutcome::How::not_reached)
                              : 0;
    if (unreached)
      parts += std::string(parts.empty() ? "" : ", ") + std::to_string(unreached) + " not reached";
    std::printf("  holds: %d over %d runs: %s\n", total, runs, parts.empty() ? "none" : parts.c_str());
    if (!t.ordering.empty()) std::printf("  ordered by the program: %s\n", t.ordering.c_str());
  }
  return t;
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
  std::vector<gpu::HoldSite> holds;
  if (a.force_race) {
    // Every kernel loaded before the first hold: loading one later needs the whole device idle,
    // which a held stream never is (CUDA's lazy loading). Read when CUDA starts, after this.
    setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    const std::vector<ForcedHold> found = forced_holds(scenarios);
    std::printf("forced replay: the simulator's races give %zu hold%s, in every file:\n", found.size(),
                found.size() == 1 ? "" : "s");
    for (const auto& f : found) {
      gpu::HoldSite h{{f.first_rank, f.first_stream, f.first_op, f.first_occurrence},
                      {f.second_rank, f.second_stream, f.second_op, f.second_occurrence},
                      f.freed_buffer,
                      f.reusing_buffer};
      std::printf("  %s waits until %s has run (%s, seed %llu)\n", h.held.text().c_str(),
                  h.until.text().c_str(), f.scenario.c_str(), static_cast<unsigned long long>(f.seed));
      holds.push_back(std::move(h));
    }
  }
  int met = 0, not_met = 0, unconfirmed = 0, no_expect = 0;
  for (const auto& s : scenarios) {
    gpu::GpuOptions o;
    if (!options(a, s.options, o)) return kBadInput;
    o.delay_sites = sites;
    o.holds = holds;
    o.hold_deadline_seconds = a.hold_deadline;
    try {
      const GpuTally t = run_one(s, o, runs);
      if (t.errors) {
        code = std::max<int>(code, kInternalError);
        continue;
      }
      using Is = HardwareVerdict::Is;
      const HardwareVerdict v = hardware_verdict(
          s.expect, {t.runs, t.differing, t.faults, static_cast<int>(t.also.size()), t.forced}, a.force_race);
      const bool clean = t.differing == 0 && t.faults == 0 && t.also.empty();
      const char* tag = v.is == Is::met           ? "ok"
                        : v.is == Is::not_met     ? "FAILED"
                        : v.is == Is::unconfirmed ? "unconf."
                        : clean                   ? "clean"
                                                  : "found";
      std::printf("%-7s %s: %s\n\n", tag, s.name.c_str(), v.text.c_str());
      met += v.is == Is::met;
      not_met += v.is == Is::not_met;
      unconfirmed += v.is == Is::unconfirmed;
      if (v.is == Is::no_expectation) {
        ++no_expect;
        if (!clean) code = std::max<int>(code, kExpectationFailed);
      }
      if (v.is == Is::not_met) code = std::max<int>(code, kExpectationFailed);
    } catch (const std::exception& e) {
      std::cerr << "shardcheck: " << e.what() << "\n";
      return kInternalError;
    }
  }
  std::printf("%zu scenario%s on the GPU: %d met expectations, %d did not", scenarios.size(),
              scenarios.size() == 1 ? "" : "s", met, not_met);
  if (unconfirmed) std::printf(", %d unconfirmed", unconfirmed);
  if (no_expect) std::printf(", %d without expectation", no_expect);
  std::printf("\n");
  return code;
}

int compare_one(const LoadedScenario& s, const GpuArgs& a, const std::string& against, int steps) {
  gpu::GpuOptions o;
  if (!options(a, s.options, o)) return kBadInput;
  TrainingState& st = *s.training();
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
  if (code == kInternalError && mpi::process().launched) mpi::abort(kInternalError);
  return first_process_code(code);
}

int gpu_run_on_gpu(const std::vector<LoadedScenario>& scenarios, const GpuArgs& a, int runs) {
  quiet_unless_first_process();
  return in_step(run_all(scenarios, a, runs));
}

int gpu_compare_on_gpu(const LoadedScenario& s, const GpuArgs& a, const std::string& against, int steps) {
  quiet_unless_first_process();
  if (auto why = compare_steps_problem(s, against, steps); !why) {
    std::cerr << "shardcheck compare: " << core::printable(why.message()) << "\n";
    return kBadInput;
  }
  return in_step(compare_one(s, a, against, steps));
}

}  // namespace shardcheck::run
