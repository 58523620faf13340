// `shardcheck run`, `explore` and `replay`: scenarios on the simulator.
#include <algorithm>
#include <iostream>

#include "cli/ci_outputs.hpp"
#include "cli/commands.hpp"
#include "cli/findings_text.hpp"
#include "cli/output_paths.hpp"
#include "cli/progress.hpp"
#include "cli/table.hpp"
#include "core/base/atomic_file.hpp"
#include "core/base/text.hpp"
#include "reports/chrome_trace.hpp"
#include "run/gpu_runs.hpp"
#include "run/interrupt.hpp"
#include "run/report.hpp"
#include "run/scenario.hpp"
#include "run/scenario_loop.hpp"

namespace shardcheck::cli {

namespace {

struct ScheduleArgs {
  std::string policy;
  int64_t seed = -1;
  int runs = 0;
  int jobs = 0;           // threads running schedules; 0: every core
  bool with_runs = true;  // false for replay, which runs one schedule
};

// The bounds of the file's `schedule:` (core::ScheduleLimits): a seed that replay takes, and
// at most as many runs as a file may ask for.
void add_schedule_options(CLI::App* cmd, ScheduleArgs& a, bool with_runs) {
  using L = core::ScheduleLimits;
  a.with_runs = with_runs;
  cmd->add_option("--policy", a.policy, "Schedule policy (default: the file's)")
      ->check(one_of({"in_order", "random", "pct", "delay_comm"}));
  cmd->add_option("--seed", a.seed,
                  with_runs
                      ? "First schedule seed (default: the file's)"
                      : "The schedule's seed, as a finding's reproduce line gives it (default: the file's "
                        "first)")
      ->transform(in_range(0, L::kMaxSeed));
  if (with_runs) {
    cmd->add_option("--runs", a.runs, "Schedules to explore (default: the file's)")
        ->transform(in_range(1, L::kMaxRuns));
    add_jobs_option(cmd, a.jobs);
  }
}

ScheduleOverrides overrides(const ScheduleArgs& a) {
  ScheduleOverrides o;
  if (!a.policy.empty()) o.policy = a.policy;
  if (a.seed >= 0) o.seed = static_cast<uint64_t>(a.seed);
  if (a.runs > 0) o.runs = a.runs;
  if (!a.with_runs) o.runs = 1;  // replay runs the one schedule of its seed
  o.jobs = a.jobs;
  return o;
}

std::string policy_flag(const ScheduleArgs& a) { return a.policy.empty() ? "" : " --policy " + a.policy; }

// Loads every file first: bad input anywhere stops everything before anything runs. Each
// refused file is added to `refused` (for the CI outputs) with its message.
bool load_all(const std::vector<std::string>& files, const ScheduleArgs& a, std::vector<LoadedScenario>& out,
              std::vector<reports::NotRun>* refused = nullptr) {
  bool ok = true;
  for (const auto& f : files) {
    std::string why;
    auto s = load_scenario(f);
    if (!s) {
      why = core::printable(s.error().message());
      std::cerr << why << "\n";
    } else if (auto opt = options_for(*s, overrides(a)); !opt) {
      why = "shardcheck: " + core::printable(opt.error().message());
      std::cerr << why << "\n";
    } else {
      out.push_back(std::move(s).value());
      continue;
    }
    ok = false;
    if (refused) refused->push_back({f, "bad input: " + why, true});
  }
  return ok;
}

struct RunArgs {
  std::vector<std::string> files;
  ScheduleArgs schedule;
  std::string report;
  CiArgs ci;
  bool check_determinism = false;
  GpuArgs gpu;
};

std::string command_line(const std::string& verb, const std::vector<std::string>& files,
                         const ScheduleArgs& a, const std::string& extra) {
  std::string c = "shardcheck " + verb;
  for (const auto& f : files) c += " " + core::shell_path(f);
  if (!a.policy.empty()) c += " --policy " + a.policy;
  if (a.seed >= 0) c += " --seed " + std::to_string(a.seed);
  if (a.runs > 0) c += " --runs " + std::to_string(a.runs);
  return c + extra;
}

// A scenario's result is assembled for a report folder or a CI output; only the folder has
// pictures that need each finding's run replayed.
std::optional<ResultOptions> report_options(const std::string& dir, bool ci) {
  if (dir.empty() && !ci) return std::nullopt;
  ResultOptions o;
  o.traces = !dir.empty();
  return o;
}

// What a scenario loop saw, for its closing lines, the report's completeness and the exit code.
struct Tally {
  size_t ran = 0;
  int failed = 0;               // expectations not met
  std::string internal_error;   // the first: "scenario: what"
  std::string bad_input;        // the first run that reached the simulator's own bound
  int determinism_checked = 0;  // scenarios
  int digests_matched = 0;      // schedules whose rerun repeated
  int nondeterministic = 0;     // scenarios
  size_t captures = 0;          // of `ran`: captured programs, which have no expectation
  int captures_found = 0;       // captured programs with findings
  int captures_partial = 0;     // captured programs whose ranks did not all finish, without findings
  size_t open = 0;              // of `ran`: files without `expect:`
  int open_found = 0;           // of those, with findings
  size_t unjudged = 0;          // of `ran`: stopped before a schedule finished, no verdict
  size_t errors = 0;            // of `ran`: ended in an internal error or at the simulator's bound

  void add(const LoadedScenario& s, const CheckedRun& c) {
    ++ran;
    if (!c.error.empty() && internal_error.empty()) internal_error = s.name + ": " + c.error;
    if (!c.bad_input.empty() && bad_input.empty()) bad_input = c.bad_input;
    if (c.outcome.determinism) {
      ++determinism_checked;
      digests_matched += c.outcome.determinism->matched ? c.outcome.determinism->runs : 0;
      nondeterministic += c.outcome.determinism->matched ? 0 : 1;
    }
    if (!c.error.empty() || !c.bad_input.empty()) {
      // No verdict, and never clean: the run that erred may be the one that holds the finding.
      ++errors;
      ++failed;
    } else if (c.stopped && c.outcome.explored.runs_done == 0) {
      ++unjudged;  // neither met nor failed: nothing ran to judge
    } else {
      add_verdict(s, c);
    }
  }
  void add_verdict(const LoadedScenario& s, const CheckedRun& c) {
    if (s.capture()) {
      ++captures;
      const bool partial_only = !s.partial.empty() && c.outcome.explored.findings.empty();
      captures_partial += partial_only ? 1 : 0;
      captures_found += c.outcome.judged.met || partial_only ? 0 : 1;
    } else if (!s.expect.given) {
      ++open;
      open_found += c.outcome.judged.met ? 0 : 1;
    }
    failed += c.outcome.judged.met ? 0 : 1;
  }
  // Stops the loop: after a signal, or after an internal error, past which nothing is trusted.
  bool stop() const { return interrupted() || !internal_error.empty(); }
};

// "3 scenarios: 3 met expectations, 0 did not", with captured programs (no expectation: clean
// or not) counted apart: "1 captured program: 1 with findings, 0 clean".
std::string summary_line(const Tally& t) {
  std::string line;
  const size_t files = t.ran - t.captures - t.open - t.unjudged - t.errors;
  const int files_failed =
      t.failed - t.captures_found - t.captures_partial - t.open_found - static_cast<int>(t.errors);
  if (files > 0 || (t.captures == 0 && t.open == 0 && t.unjudged == 0 && t.errors == 0)) {
    line = std::to_string(files) + " scenario" + (files == 1 ? "" : "s") + ": " +
           std::to_string(static_cast<int>(files) - files_failed) + " met expectations, " +
           std::to_string(files_failed) + " did not";
  }
  if (t.captures > 0) {
    line += (line.empty() ? "" : "; ") + std::to_string(t.captures) + " captured program" +
            (t.captures == 1 ? "" : "s") + ": " + std::to_string(t.captures_found) + " with findings, " +
            std::to_string(static_cast<int>(t.captures) - t.captures_found - t.captures_partial) + " clean" +
            (t.captures_partial > 0 ? ", " + std::to_string(t.captures_partial) + " partial without findings"
                                    : std::string());
  }
  if (t.open > 0) {
    line += (line.empty() ? "" : "; ") + std::to_string(t.open) + " scenario" + (t.open == 1 ? "" : "s") +
            " without an expectation: " + std::to_string(t.open_found) + " with findings, " +
            std::to_string(static_cast<int>(t.open) - t.open_found) + " clean";
  }
  if (t.unjudged > 0) {
    line += (line.empty() ? "" : "; ") + std::to_string(t.unjudged) + " stopped before a schedule finished" +
            ": no verdict";
  }
  if (t.errors > 0) {
    line += (line.empty() ? "" : "; ") + std::to_string(t.errors) + " ended in an error: no verdict";
  }
  return line;
}

// The closing lines of `run`: stopped early, and the determinism check's sum.
void print_ending(const Tally& t, size_t total) {
  if (!t.internal_error.empty()) {
    std::cout << "stopped after " << t.ran << " of " << total << " scenarios by an internal error in "
              << core::printable(t.internal_error) << "\n";
  } else if (interrupted() && t.ran < total) {
    std::cout << interrupt_reason() << ": " << t.ran << " of " << total << " scenarios ran\n";
  }
  if (t.determinism_checked == 0) return;
  if (t.nondeterministic == 0) {
    std::cout << "determinism: all " << t.digests_matched << " trace digests of " << t.determinism_checked
              << " scenario" << (t.determinism_checked == 1 ? "" : "s")
              << " matched on a rerun with the same seeds\n";
  } else {
    std::cout << "determinism: " << t.nondeterministic << " of " << t.determinism_checked
              << " scenarios did not repeat (NONDETERMINISTIC above): shardcheck is at fault\n";
  }
}

// Marks the report incomplete when the loop stopped early, and returns the exit code.
int finish(reports::Report& report, const Tally& t, const std::string& partial) {
  if (!t.internal_error.empty()) {
    mark_incomplete(report, reports::Report::kInternalError, "internal error in " + t.internal_error);
  } else if (!t.bad_input.empty()) {
    mark_incomplete(report, reports::Report::kBadInput, t.bad_input);
  } else if (interrupted()) {
    mark_incomplete(report, reports::Report::kInterrupted, interrupt_reason() + partial);
  }
  return exit_code(!t.internal_error.empty(), t.nondeterministic > 0, t.failed ? kExpectationFailed : kOk,
                   !t.bad_input.empty());
}

int planned_runs(const LoadedScenario& s, const ScheduleOverrides& o) {
  return o.runs.value_or(s.schedule.runs);
}

// A scenario's header, printed as it starts.
void print_header(const LoadedScenario& s, int runs) {
  std::cout << "== " << core::printable(s.name) << " (" << core::printable(s.file) << "): " << runs
            << " schedule" << (runs == 1 ? "" : "s") << std::endl;
}

void print_run(const LoadedScenario& s, const CheckedRun& c, const std::string& policy, int planned) {
  const int runs = c.outcome.explored.runs_done;
  if (c.stopped) {
    std::cout << "stopped early by an interrupt after " << runs << " of " << planned << " schedules\n";
  } else if (runs < planned) {
    std::cout << "ran " << runs << " of " << planned << " schedules\n";
  }
  if (!c.outcome.jobs_note.empty()) std::cerr << core::printable(c.outcome.jobs_note) << "\n";
  print_findings(std::cout, s, c.outcome.explored.findings, policy);
  if (!c.error.empty()) std::cout << "internal error: " << core::printable(c.error) << "\n";
  if (!c.bad_input.empty()) std::cout << core::printable(c.bad_input) << "\n";
  if (c.outcome.determinism) print_determinism(std::cout, s, *c.outcome.determinism);
  print_verdict(std::cout, s, c);
  std::cout << std::flush;  // a reader of a pipe sees each scenario as it finishes
}

// `run --backend gpu`: what applies to the simulator alone is refused, the rest runs on GPUs.
int run_files_on_gpu(const RunArgs& a, const std::vector<LoadedScenario>& scenarios) {
  if (a.ci.any()) {
    std::cerr << "shardcheck: --junit and --sarif report the simulator's findings; they do not apply to "
                 "--backend gpu\n";
    return kBadInput;
  }
  for (const auto& s : scenarios) {
    if (!s.capture()) continue;
    std::cerr << "shardcheck: " << core::printable(s.file)
              << " is a captured program, which runs on the simulator only (drop --backend "
              << core::printable(a.gpu.backend) << ")\n";
    return kBadInput;
  }
  if (a.check_determinism) {
    std::cerr << "shardcheck: --check-determinism reruns simulated schedules; it does not apply to --backend "
              << core::printable(a.gpu.backend) << "\n";
    return kBadInput;
  }
  return run_on_gpu(scenarios, a.gpu, a.schedule.runs > 0 ? a.schedule.runs : 1);
}

int run_files(const RunArgs& a) {
  if (!outputs_ok({{"--junit", a.ci.junit}, {"--sarif", a.ci.sarif}}, {"--report", a.report}, a.files))
    return kBadInput;
  std::vector<LoadedScenario> scenarios;
  std::vector<reports::NotRun> refused;
  const std::string command =
      command_line("run", a.files, a.schedule,
                   std::string(a.check_determinism ? " --check-determinism" : "") +
                       (a.report.empty() ? "" : " --report " + core::shell_path(a.report)));
  if (!load_all(a.files, a.schedule, scenarios, &refused))
    return refused_input(a.ci, command, scenarios, std::move(refused));
  if (a.gpu.backend != "sim") return run_files_on_gpu(a, scenarios);
  const LaunchRole role = join_launch();
  if (role.leave) return kOk;
  const std::string report_dir = role.prints ? a.report : "";
  InterruptScope interrupts;
  reports::Report report;
  report.command = command;
  Tally t;
  CiRecord ci;
  int64_t total = 0;
  for (const auto& s : scenarios)
    total += planned_runs(s, overrides(a.schedule)) * (a.check_determinism ? 2 : 1);
  ProgressLine line(total);
  // Each header prints when its scenario's turn comes (run/scenario_loop.hpp).
  ScenarioLoop loop;
  loop.overrides = overrides(a.schedule);
  loop.check_determinism = a.check_determinism;
  loop.result = report_options(report_dir, role.prints && a.ci.any());
  loop.across_processes = role.shared;
  loop.progress = [&] { return line.scenario(); };
  if (!t.stop()) {
    run_scenarios(
        scenarios, loop,
        [&](size_t i) {
          line.print([&] { print_header(scenarios[i], planned_runs(scenarios[i], overrides(a.schedule))); });
        },
        [&](size_t i, CheckedRun c) {
          const LoadedScenario& s = scenarios[i];
          if (c.result) {
            report.scenarios.push_back(std::move(*c.result));
            ci.add(s, report.scenarios.back());
          }
          line.print(
              [&] { print_run(s, c, policy_flag(a.schedule), planned_runs(s, overrides(a.schedule))); });
          t.add(s, c);
          return !t.stop();
        });
  }
  line.clear();
  std::cout << "\n" << summary_line(t) << "\n";
  print_ending(t, scenarios.size());
  const int code =
      finish(report, t,
             ", after " + std::to_string(t.ran) + " of " + std::to_string(scenarios.size()) + " scenarios");
  ci.not_reached(scenarios, t.ran,
                 t.internal_error.empty() ? interrupt_reason() : "stopped by an internal error");
  const bool ci_written = !role.prints || write_ci(a.ci, report, std::move(ci));
  if (!report_dir.empty() && !write_report_to(report, report_dir)) return kInternalError;
  return ci_written ? code : kInternalError;
}

struct ExploreArgs {
  std::string file;
  ScheduleArgs schedule;
  bool all = false;
  bool check_determinism = false;
  std::string report;
  CiArgs ci;
};

void print_explored(const LoadedScenario& s, const CheckedRun& c, const sim::Options& opt) {
  const sim::ExploreResult& e = c.outcome.explored;
  std::cout << "explored " << e.runs_done << " schedule" << (e.runs_done == 1 ? "" : "s") << " of "
            << core::printable(s.name) << " (policy " << sim::to_string(opt.policy) << ", seeds " << opt.seed
            << ".." << opt.seed + e.runs_done - 1 << ") in " << duration_text(c.outcome.seconds)
            << (c.stopped ? "; " + interrupt_reason() : "") << "\n";
  if (e.first_hit >= 0) {
    std::cout << "first finding after " << e.first_hit + 1 << " schedule" << (e.first_hit == 0 ? "" : "s")
              << " (seed " << opt.seed + e.first_hit << ")\n\n";
  } else {
    std::cout << "no findings\n\n";
  }
}

int explore_file(const ExploreArgs& a) {
  if (!outputs_ok({{"--junit", a.ci.junit}, {"--sarif", a.ci.sarif}}, {"--report", a.report}, {a.file}))
    return kBadInput;
  std::vector<LoadedScenario> scenarios;
  std::vector<reports::NotRun> refused;
  const std::string command =
      command_line("explore", {a.file}, a.schedule,
                   std::string(a.all ? " --all" : "") + (a.check_determinism ? " --check-determinism" : "") +
                       (a.report.empty() ? "" : " --report " + core::shell_path(a.report)));
  if (!load_all({a.file}, a.schedule, scenarios, &refused))
    return refused_input(a.ci, command, scenarios, std::move(refused));
  const LoadedScenario& s = scenarios.front();
  const LaunchRole role = join_launch();
  if (role.leave) return kOk;
  ScheduleOverrides o = overrides(a.schedule);
  o.stop_at_first = !a.all;
  o.across_processes = role.shared;
  const sim::Options opt = options_for(s, o).value();
  const std::string report_dir = role.prints ? a.report : "";
  InterruptScope interrupts;
  const int runs = o.runs.value_or(s.schedule.runs);
  std::cout << "exploring up to " << runs << " schedule" << (runs == 1 ? "" : "s") << " of "
            << core::printable(s.name) << " from seed " << opt.seed
            << (a.all ? "" : ", until the first finding") << std::endl;  // tells a watcher it has begun
  const std::optional<ResultOptions> ro = report_options(report_dir, role.prints && a.ci.any());
  CheckedRun c;
  {
    ProgressLine line(static_cast<int64_t>(runs) * (a.check_determinism ? 2 : 1));
    o.progress = line.scenario();
    c = run_checked(s, o, a.check_determinism, ro);
  }
  if (!c.outcome.jobs_note.empty()) std::cerr << core::printable(c.outcome.jobs_note) << "\n";
  print_explored(s, c, opt);
  print_findings(std::cout, s, c.outcome.explored.findings, policy_flag(a.schedule));
  if (!c.error.empty()) std::cout << "internal error: " << core::printable(c.error) << "\n";
  if (!c.bad_input.empty()) std::cout << core::printable(c.bad_input) << "\n";
  if (c.outcome.determinism) print_determinism(std::cout, s, *c.outcome.determinism);
  print_verdict(std::cout, s, c);
  Tally t;
  t.add(s, c);
  reports::Report report;
  report.command = command;
  CiRecord ci;
  if (c.result) {
    report.scenarios.push_back(std::move(*c.result));
    ci.add(s, report.scenarios.back());
  }
  const int code =
      finish(report, t, ", after " + std::to_string(c.outcome.explored.runs_done) + " schedules");
  const bool ci_written = !role.prints || write_ci(a.ci, report, std::move(ci));
  if (!report_dir.empty() && !write_report_to(report, report_dir)) return kInternalError;
  return ci_written ? code : kInternalError;
}

struct ReplayArgs {
  std::string file;
  ScheduleArgs schedule;
  std::string trace;
};

int replay_file(const ReplayArgs& a) {
  if (!outputs_ok({{"--trace", a.trace}}, {"", ""}, {a.file})) return kBadInput;
  std::vector<LoadedScenario> scenarios;
  if (!load_all({a.file}, a.schedule, scenarios)) return kBadInput;
  const LoadedScenario& s = scenarios.front();
  const sim::Options opt = options_for(s, overrides(a.schedule)).value();
  sim::Replay r = sim::replay(s.factory, opt);
  std::cout << "replayed " << core::printable(s.name) << " with seed " << opt.seed << " (policy "
            << sim::to_string(opt.policy) << "): " << r.result.steps << " steps, " << r.result.ops_executed
            << " stream operations, trace digest " << std::hex << r.result.trace_digest << std::dec << "\n\n";
  print_findings(std::cout, s, r.result.findings, policy_flag(a.schedule));
  if (!a.trace.empty()) {
    r.log.title = s.name + " seed " + std::to_string(opt.seed);
    if (auto st = core::write_file_atomic(a.trace, reports::chrome_trace(r.log, r.result.findings)); !st) {
      std::cerr << "shardcheck: " << core::printable(st.message()) << "\n";
      return kBadInput;
    }
    std::cout << "trace written to " << core::printable(a.trace) << " (open it in https://ui.perfetto.dev)\n";
  }
  if (r.result.limit) {
    std::cout << core::printable(s.file)
              << ": bad input: this file needs more than the simulator allows one run: "
              << core::printable(r.result.error) << " (seed " << opt.seed << ")\n";
    return kBadInput;
  }
  if (!r.result.error.empty()) {
    std::cout << "internal error: " << core::printable(r.result.error) << "\n";
    return kInternalError;
  }
  const core::ExpectationResult judged = core::judge(s.expect, r.result.findings);
  print_verdict(std::cout, s, judged);
  return judged.met ? kOk : kExpectationFailed;
}

}  // namespace

Action add_run_command(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run scenarios (on the simulator, or with --backend gpu on GPUs) and check their expectations");
  cmd->add_option("files", a->files, "Scenario files")->required();
  add_schedule_options(cmd, a->schedule, true);
  cmd->add_option("--report", a->report,
                  "Write a report (Markdown, HTML, JSON, Chrome traces) to this folder");
  cmd->add_flag(
      "--check-determinism", a->check_determinism,
      "Rerun every schedule with its seed and require the same trace digest and findings (exit 3 if not)");
  add_ci_options(cmd, a->ci);
  add_gpu_options(cmd, a->gpu);
  return [a] { return run_files(*a); };
}

Action add_explore_command(CLI::App& app) {
  auto a = std::make_shared<ExploreArgs>();
  CLI::App* cmd = app.add_subcommand("explore", "Explore schedules of a scenario until the first finding");
  cmd->add_option("file", a->file, "Scenario file")->required();
  add_schedule_options(cmd, a->schedule, true);
  cmd->add_flag("--all", a->all, "Keep exploring after the first finding");
  cmd->add_flag("--check-determinism", a->check_determinism,
                "Rerun every schedule explored with its seed and require the same trace digest and findings "
                "(exit 3 if not)");
  cmd->add_option("--report", a->report,
                  "Write a report (Markdown, HTML, JSON, Chrome traces) to this folder");
  add_ci_options(cmd, a->ci);
  return [a] { return explore_file(*a); };
}

Action add_replay_command(CLI::App& app) {
  auto a = std::make_shared<ReplayArgs>();
  CLI::App* cmd =
      app.add_subcommand("replay", "Replay one schedule of a scenario, optionally writing a Chrome trace");
  cmd->add_option("file", a->file, "Scenario file")->required();
  add_schedule_options(cmd, a->schedule, false);
  cmd->add_option("--trace", a->trace, "Write the schedule as a Chrome trace (JSON) to this file");
  return [a] { return replay_file(*a); };
}

}  // namespace shardcheck::cli
