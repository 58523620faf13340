// The GPU commands. Everything that needs CUDA sits behind SHARDCHECK_HAVE_GPU.
#include "run/gpu_runs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
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
      // overtakes it: the order program order does not have.
      const core::AccessSite& a = race->first.op_id <= race->second.op_id ? race->first : race->second;
      RaceSite site{a.rank, a.stream, a.op, s.name, f.seed};
      if (std::find(sites.begin(), sites.end(), site) == sites.end()) sites.push_back(std::move(site));
    }
  }
  return sites;
}

bool ForcedHold::operator==(const ForcedHold& o) const {
  return first_rank == o.first_rank && second_rank == o.second_rank && first_stream == o.first_stream &&
         second_stream == o.second_stream && first_op == o.first_op && second_op == o.second_op &&
         first_occurrence == o.first_occurrence && second_occurrence == o.second_occurrence;
}

std::vector<ForcedHold> forced_holds(const std::vector<LoadedScenario>& scenarios) {
  std::vector<ForcedHold> holds;
  for (const auto& s : scenarios) {
    const ScenarioOutcome out = run_scenario(s, {});
    for (const auto& f : out.explored.findings) {
      const auto* race = std::get_if<core::RaceDetail>(&f.detail);
      if (f.kind != core::FindingKind::stream_race || !race) continue;
      ScheduleOverrides o;
      o.seed = f.seed;
      const auto opt = options_for(s, o);
      if (!opt) continue;
      const sim::Replay r = sim::replay(s.factory, *opt);
      const std::vector<sim::OpInfo>& ops = r.world->ops();
      // The how-manyth operation of its rank and stream with its name `op` is.
      auto occurrence = [&](uint32_t op) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < op && op < ops.size(); ++i)
          n += ops[i].rank == ops[op].rank && ops[i].stream == ops[op].stream && ops[i].name == ops[op].name;
        return n;
      };
      if (race->first.op_id >= ops.size() || race->second.op_id >= ops.size()) continue;
      ForcedHold h{race->first.rank,
                   race->second.rank,
                   race->first.stream,
                   race->second.stream,
                   race->first.op,
                   race->second.op,
                   occurrence(race->first.op_id),
                   occurrence(race->second.op_id),
                   "",
                   "",
                   s.name,
                   f.seed};
      if (race->first.lifetime != race->second.lifetime && race->first.rank == race->second.rank) {
        h.freed_buffer = race->first.buffer;
        h.reusing_buffer = race->second.buffer;
      }
      // One hold per first access: it waits for the first of its racing accesses to run, which
      // is enough to force the order; holding it for a later one too would only wait longer.
      auto same_first = [&](const ForcedHold& x) {
        return x.scenario == h.scenario && x.first_rank == h.first_rank && x.first_stream == h.first_stream &&
               x.first_op == h.first_op && x.first_occurrence == h.first_occurrence;
      };
      if (std::find_if(holds.begin(), holds.end(), same_first) == holds.end()) holds.push_back(std::move(h));
    }
  }
  return holds;
}

HardwareVerdict hardware_verdict(const core::Expectation& e, const HardwareTally& t, bool forced) {
  using K = core::FindingKind;
  const bool showed = t.differing > 0 || t.faults > 0 || t.other > 0;
  HardwareVerdict v;
  std::string seen = std::to_string(t.differing) + " of " + std::to_string(t.runs) + " runs differ";
  if (t.faults) seen += ", " + std::to_string(t.faults) + " stopped by the program";
  if (t.other) seen += ", " + std::to_string(t.other) + " other finding" + (t.other == 1 ? "" : "s");
  if (!e.given) {
    v.is = HardwareVerdict::Is::no_expectation;
    v.text = "no expectation; " + seen;
    return v;
  }
  const std::string expected = "expected " + core::describe(e) + "; ";
  auto wants = [&](K k) { return std::find(e.findings.begin(), e.findings.end(), k) != e.findings.end(); };
  // Expected findings that values on hardware may not show.
  bool unseen_ok = !e.findings.empty();
  for (K k : e.findings) unseen_ok &= k == K::stream_race || k == K::uninitialized_read || k == K::deadlock;
  if (e.findings.empty()) {
    v.is = showed ? HardwareVerdict::Is::not_met : HardwareVerdict::Is::met;
    v.text = expected + seen;
  } else if (wants(K::stream_race) && forced) {
    v.text = expected + "forced, " + seen;
    if (t.differing == t.runs && t.runs > 0) {
      v.is = HardwareVerdict::Is::met;
    } else if (t.differing == 0 && t.forced == t.runs && t.runs > 0) {
      v.is = HardwareVerdict::Is::unconfirmed;
      v.text += ": unconfirmed, the racing order ran in every run but changed no value the program keeps";
    } else if (t.differing == 0 && t.forced == 0) {
      v.is = HardwareVerdict::Is::unconfirmed;
      v.text +=
          ": unconfirmed, no hold met its second access after it (the allocator handed out other blocks)";
    } else {
      v.is = HardwareVerdict::Is::not_met;
      v.text += " (a forced race must change values in every run)";
    }
  } else if (!showed && unseen_ok) {
    v.is = HardwareVerdict::Is::unconfirmed;
    v.text = expected + seen + ": unconfirmed, ";
    v.text += wants(K::stream_race) ? "the race's order did not happen in these runs (--force-race forces it)"
              : wants(K::deadlock)
                  ? "a send cycle completes on the device-local communicator (its sends are eager)"
                  : "values cannot show an uninitialized read";
  } else {
    v.is = showed ? HardwareVerdict::Is::met : HardwareVerdict::Is::not_met;
    v.text = expected + seen;
  }
  return v;
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
  if (a.force_race && (o.comm != gpu::CommMode::local || gpu::mpi_process().launched)) {
    std::cerr
        << "shardcheck: --force-race runs on the device-local communicator (--comm local, one process)\n";
    return false;
  }
  if (a.force_race && !(a.hold_deadline > 0 && a.hold_deadline <= 3600)) {
    std::cerr << "shardcheck: --hold-deadline is between 0 and 3600 seconds\n";
    return false;
  }
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
  const GpuBaseline baseline = s.training ? baseline_for(s, o) : GpuBaseline{};
  auto tally_holds = [&](const gpu::GpuRunResult& r) {
    bool any = false;
    for (const auto& h : r.holds) any |= h.how == gpu::HoldOutcome::How::second_access;
    t.forced += any;
    for (const auto& h : r.holds) {
      ++t.holds[h.how];
      if (h.how == gpu::HoldOutcome::How::ordering && t.ordering.empty()) t.ordering = h.why;
    }
  };
  for (int i = 0; i < runs; ++i) {
    if (s.training) {
      GpuTrainingRun r = run_training_gpu(*s.training, o, /*judge*/ true);
      t.delays += r.result.delays;
      tally_holds(r.result);
      if (!r.result.completed) {
        ++(r.result.program_fault ? t.faults : t.errors);
        if (t.example.empty()) t.example = r.result.error;
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
        if (std::find(t.also.begin(), t.also.end(), line) == t.also.end()) t.also.push_back(line);
      }
      t.differing += !difference.empty();
      if (t.example.empty()) t.example = difference;
    } else {
      GpuTraceRun r = run_trace_gpu(s, o);
      t.delays += r.result.delays;
      tally_holds(r.result);
      if (!r.result.completed) {
        ++(r.result.program_fault ? t.faults : t.errors);
        if (t.example.empty()) t.example = r.result.error;
        continue;
      }
      t.differing += r.buffers_differing > 0;
      if (t.example.empty()) t.example = r.first_difference;
    }
  }
  std::printf("%-40s %d of %d runs differ from %s%s%s\n", s.name.c_str(), t.differing, runs,
              s.training ? baseline.name.c_str() : "the program-order run",
              t.faults ? (", " + std::to_string(t.faults) + " stopped by the program").c_str() : "",
              t.errors ? " (with errors)" : "");
  if (!t.example.empty()) std::printf("  first: %s\n", t.example.c_str());
  for (const auto& line : t.also) std::printf("  also found: %s\n", line.c_str());
  if (o.process_rank >= 0) t.delays = gpu::mpi_sum(t.delays);
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
