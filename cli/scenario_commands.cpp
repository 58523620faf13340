// `shardcheck run`, `explore` and `replay`: scenarios on the simulator.
#include <iostream>

#include "cli/commands.hpp"
#include "cli/driver.hpp"
#include "cli/gpu_commands.hpp"
#include "cli/reporting.hpp"
#include "core/atomic_file.hpp"
#include "reports/chrome_trace.hpp"

namespace shardcheck::cli {

namespace {

struct ScheduleArgs {
  std::string policy;
  int64_t seed = -1;
  int runs = 0;
};

void add_schedule_options(CLI::App* cmd, ScheduleArgs& a, bool with_runs) {
  cmd->add_option("--policy", a.policy, "Schedule policy: in_order, random, pct or delay_comm (default: the file's)");
  cmd->add_option("--seed", a.seed, "First schedule seed (default: the file's)")->check(CLI::NonNegativeNumber);
  if (with_runs) cmd->add_option("--runs", a.runs, "Schedules to explore (default: the file's)")->check(CLI::PositiveNumber);
}

ScheduleOverrides overrides(const ScheduleArgs& a) {
  ScheduleOverrides o;
  if (!a.policy.empty()) o.policy = a.policy;
  if (a.seed >= 0) o.seed = static_cast<uint64_t>(a.seed);
  if (a.runs > 0) o.runs = a.runs;
  return o;
}

std::string policy_flag(const ScheduleArgs& a) { return a.policy.empty() ? "" : " --policy " + a.policy; }

// Loads every file first: bad input anywhere stops everything before anything runs.
bool load_all(const std::vector<std::string>& files, const ScheduleArgs& a, std::vector<LoadedScenario>& out) {
  bool ok = true;
  for (const auto& f : files) {
    auto s = load_scenario(f);
    if (!s) {
      std::cerr << s.error().message() << "\n";
      ok = false;
      continue;
    }
    if (auto opt = options_for(*s, overrides(a)); !opt) {
      std::cerr << "shardcheck: " << opt.error().message() << "\n";
      ok = false;
      continue;
    }
    out.push_back(std::move(s).value());
  }
  return ok;
}

struct RunArgs {
  std::vector<std::string> files;
  ScheduleArgs schedule;
  std::string report;
  GpuArgs gpu;
};

std::string command_line(const std::string& verb, const std::vector<std::string>& files, const ScheduleArgs& a,
                         const std::string& extra) {
  std::string c = "shardcheck " + verb;
  for (const auto& f : files) c += " " + f;
  if (!a.policy.empty()) c += " --policy " + a.policy;
  if (a.seed >= 0) c += " --seed " + std::to_string(a.seed);
  if (a.runs > 0) c += " --runs " + std::to_string(a.runs);
  return c + extra;
}

int run_files(const RunArgs& a) {
  std::vector<LoadedScenario> scenarios;
  if (!load_all(a.files, a.schedule, scenarios)) return kBadInput;
  if (a.gpu.backend != "sim") return run_on_gpu(scenarios, a.gpu, a.schedule.runs > 0 ? a.schedule.runs : 1);
  int failed = 0, errors = 0;
  reports::Report report;
  report.command = command_line("run", a.files, a.schedule, a.report.empty() ? "" : " --report " + a.report);
  for (const auto& s : scenarios) {
    ScenarioOutcome o = run_scenario(s, overrides(a.schedule));
    if (!a.report.empty()) report.scenarios.push_back(scenario_result(s, o, overrides(a.schedule), {}));
    std::cout << "== " << s.name << " (" << s.file << "): " << o.explored.runs_done << " schedule"
              << (o.explored.runs_done == 1 ? "" : "s") << "\n";
    print_findings(std::cout, s, o.explored.findings, policy_flag(a.schedule));
    if (!o.explored.error.empty()) {
      std::cout << "internal error (seed " << o.explored.error_seed << "): " << o.explored.error << "\n";
      ++errors;
    }
    print_verdict(std::cout, s, o.judged);
    failed += o.judged.met ? 0 : 1;
  }
  std::cout << "\n" << scenarios.size() << " scenario" << (scenarios.size() == 1 ? "" : "s") << ": "
            << scenarios.size() - failed << " met expectations, " << failed << " did not\n";
  if (!a.report.empty() && !write_report_to(report, a.report)) return kInternalError;
  if (errors) return kInternalError;
  return failed ? kExpectationFailed : kOk;
}

struct ExploreArgs {
  std::string file;
  ScheduleArgs schedule;
  bool all = false;
  std::string report;
};

int explore_file(const ExploreArgs& a) {
  std::vector<LoadedScenario> scenarios;
  if (!load_all({a.file}, a.schedule, scenarios)) return kBadInput;
  const LoadedScenario& s = scenarios.front();
  ScheduleOverrides o = overrides(a.schedule);
  o.stop_at_first = !a.all;
  ScenarioOutcome out = run_scenario(s, o);
  const sim::Options opt = options_for(s, o).value();
  std::cout << "explored " << out.explored.runs_done << " schedule" << (out.explored.runs_done == 1 ? "" : "s")
            << " of " << s.name << " (policy " << sim::to_string(opt.policy) << ", seeds " << opt.seed << ".."
            << opt.seed + out.explored.runs_done - 1 << ") in " << out.seconds << " s\n";
  if (out.explored.first_hit >= 0) {
    std::cout << "first finding after " << out.explored.first_hit + 1 << " schedule"
              << (out.explored.first_hit == 0 ? "" : "s") << " (seed " << opt.seed + out.explored.first_hit << ")\n\n";
  } else {
    std::cout << "no findings\n\n";
  }
  print_findings(std::cout, s, out.explored.findings, policy_flag(a.schedule));
  if (!out.explored.error.empty()) {
    std::cout << "internal error (seed " << out.explored.error_seed << "): " << out.explored.error << "\n";
    return kInternalError;
  }
  print_verdict(std::cout, s, out.judged);
  if (!a.report.empty()) {
    reports::Report report;
    report.command = command_line("explore", {a.file}, a.schedule, (a.all ? " --all" : "") + std::string(" --report ") + a.report);
    report.scenarios.push_back(scenario_result(s, out, o, {}));
    if (!write_report_to(report, a.report)) return kInternalError;
  }
  return out.judged.met ? kOk : kExpectationFailed;
}

struct ReplayArgs {
  std::string file;
  ScheduleArgs schedule;
  std::string trace;
};

int replay_file(const ReplayArgs& a) {
  std::vector<LoadedScenario> scenarios;
  if (!load_all({a.file}, a.schedule, scenarios)) return kBadInput;
  const LoadedScenario& s = scenarios.front();
  const sim::Options opt = options_for(s, overrides(a.schedule)).value();
  sim::Replay r = sim::replay(s.factory, opt);
  std::cout << "replayed " << s.name << " with seed " << opt.seed << " (policy " << sim::to_string(opt.policy) << "): "
            << r.result.steps << " steps, " << r.result.ops_executed << " stream operations, trace digest " << std::hex
            << r.result.trace_digest << std::dec << "\n\n";
  print_findings(std::cout, s, r.result.findings, policy_flag(a.schedule));
  if (!a.trace.empty()) {
    r.log.title = s.name + " seed " + std::to_string(opt.seed);
    if (auto st = core::write_file_atomic(a.trace, reports::chrome_trace(r.log, r.result.findings)); !st) {
      std::cerr << "shardcheck: " << st.message() << "\n";
      return kBadInput;
    }
    std::cout << "trace written to " << a.trace << " (open it in https://ui.perfetto.dev)\n";
  }
  if (!r.result.error.empty()) {
    std::cout << "internal error: " << r.result.error << "\n";
    return kInternalError;
  }
  const core::ExpectationResult judged = core::judge(s.expect, r.result.findings);
  print_verdict(std::cout, s, judged);
  return judged.met ? kOk : kExpectationFailed;
}

}  // namespace

Action add_run_command(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Run scenarios on the simulator and check their expectations");
  cmd->add_option("files", a->files, "Scenario files")->required();
  add_schedule_options(cmd, a->schedule, true);
  cmd->add_option("--report", a->report, "Write a report (Markdown, HTML, JSON, Chrome traces) to this folder");
  add_gpu_options(cmd, a->gpu);
  return [a] { return run_files(*a); };
}

Action add_explore_command(CLI::App& app) {
  auto a = std::make_shared<ExploreArgs>();
  CLI::App* cmd = app.add_subcommand("explore", "Explore schedules of a scenario until the first finding");
  cmd->add_option("file", a->file, "Scenario file")->required();
  add_schedule_options(cmd, a->schedule, true);
  cmd->add_flag("--all", a->all, "Keep exploring after the first finding");
  cmd->add_option("--report", a->report, "Write a report (Markdown, HTML, JSON, Chrome traces) to this folder");
  return [a] { return explore_file(*a); };
}

Action add_replay_command(CLI::App& app) {
  auto a = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app.add_subcommand("replay", "Replay one schedule of a scenario, optionally writing a Chrome trace");
  cmd->add_option("file", a->file, "Scenario file")->required();
  add_schedule_options(cmd, a->schedule, false);
  cmd->add_option("--trace", a->trace, "Write the schedule as a Chrome trace (JSON) to this file");
  return [a] { return replay_file(*a); };
}

}  // namespace shardcheck::cli
