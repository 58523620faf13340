// `shardcheck demo`: what `make demo` runs. Every bug of the catalog and every trace
// scenario on the simulator, buggy and fixed, each schedule run twice to check that a seed
// repeats: a progress line, a table (scenario, expected, found, schedules explored, the
// combined trace digest of its schedules, time), and a report in out/demo/. Exit 0 exactly
// when every expectation holds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/output_paths.hpp"
#include "cli/progress.hpp"
#include "cli/table.hpp"
#include "core/base/text.hpp"
#include "reports/format.hpp"
#include "run/interrupt.hpp"
#include "run/report.hpp"
#include "run/scenario.hpp"
#include "run/scenario_loop.hpp"

namespace shardcheck::cli {

namespace {

struct DemoArgs {
  std::string scenarios;
  std::string out = "out/demo";
  int jobs = 0;  // threads running schedules; 0: every core
};

// `scenarios/` under the working directory, else the installed copy beside the binary
// (<prefix>/share/shardcheck/scenarios, from `make install`), else the source tree this was
// built from.
std::string scenario_root(const std::string& given) {
  if (!given.empty()) return given;
  if (std::filesystem::is_directory("scenarios/catalog")) return "scenarios";
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed = exe.parent_path().parent_path() / "share/shardcheck/scenarios";
    if (std::filesystem::is_directory(installed / "catalog")) return installed.string();
  }
  return std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios";
}

std::vector<std::string> yaml_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A scenario's line once it is done; while it runs, a terminal shows its name on the live line.
void progress(ProgressLine& line, size_t i, size_t n, const std::string& name, const std::string& done) {
  if (done.empty()) {
    line.label("[" + std::to_string(i + 1) + "/" + std::to_string(n) + "] " + name + ": ");
    return;
  }
  line.print([&] {
    std::printf("[%zu/%zu] %s %s\n", i + 1, n, name.c_str(), done.c_str());
    std::fflush(stdout);
  });
}

// Expected and found wrap first, then the scenario name and the digest are cut, so the table
// fits the terminal (or kPipeWidth into a pipe) wherever the finding names fit.
void print_table(const reports::Report& r) {
  Table t({{"scenario", Table::kCut, 24, 1},
           {"expected", Table::kWrap, 20},
           {"found", Table::kWrap, 20},
           {"runs", Table::kRight},
           {"time", Table::kRight},
           {"trace digest", Table::kCut, 9, 1}});
  for (const auto& s : r.scenarios) {
    t.add({core::printable(s.name), s.expected, core::kinds_to_string(s.found), std::to_string(s.schedules),
           duration_text(s.seconds), reports::digest_text(s.trace_digest) + (s.met ? "" : "  FAILED")});
  }
  std::cout << "\n";
  t.print(std::cout, output_width());
}

std::vector<LoadedScenario> load_demo(const std::vector<std::string>& files, bool& ok) {
  std::vector<LoadedScenario> loaded;
  for (const auto& f : files) {
    auto s = load_scenario(f);
    if (!s) {
      std::cerr << core::printable(s.error().message()) << "\n";
      ok = false;
      return {};
    }
    loaded.push_back(std::move(s).value());
  }
  ok = true;
  return loaded;
}

// What the demo's loop saw, for the closing lines and the exit code.
struct DemoTally {
  size_t ran = 0;
  int failed = 0;
  int digests = 0;  // trace digests that repeated on the determinism rerun
  std::vector<std::string> nondeterministic;
  std::string internal_error;  // the first: "scenario: what"
  std::string bad_input;       // the first run that reached the simulator's own bound
};

void print_ending(const DemoTally& t, size_t total) {
  std::cout << "\n" << t.ran - t.failed << " of " << t.ran << " scenarios met their expectations\n";
  if (t.nondeterministic.empty()) {
    std::cout << "determinism: all " << t.digests << " trace digests of " << t.ran
              << " scenarios matched on a rerun with the same seeds\n";
  } else {
    std::cout << "determinism: NONDETERMINISTIC (shardcheck is at fault) in";
    for (const auto& n : t.nondeterministic) std::cout << " " << core::printable(n);
    std::cout << "\n";
  }
  if (!t.internal_error.empty()) {
    std::cout << "stopped after " << t.ran << " of " << total << " scenarios by an internal error in "
              << core::printable(t.internal_error) << "\n";
  } else if (interrupted() && t.ran < total) {
    std::cout << interrupt_reason() << ": " << t.ran << " of " << total << " scenarios ran\n";
  }
}

// The catalog's and the trace folder's scenarios under `root`, loaded; false (after saying
// why) when there are none or one is bad input.
bool demo_scenarios(const std::string& root, std::vector<LoadedScenario>& loaded) {
  std::vector<std::string> files = yaml_files(root + "/catalog");
  for (auto& f : yaml_files(root + "/trace")) files.push_back(f);
  if (files.empty()) {
    std::cerr << "shardcheck demo: no scenarios under " << core::printable(root) << "/catalog or "
              << core::printable(root) << "/trace\n";
    return false;
  }
  bool ok = false;
  loaded = load_demo(files, ok);
  return ok;
}

// Marks the report incomplete when the demo stopped early.
void mark_stop(reports::Report& report, const DemoTally& t, size_t total) {
  if (!t.internal_error.empty()) {
    mark_incomplete(report, reports::Report::kInternalError, "internal error in " + t.internal_error);
  } else if (!t.bad_input.empty()) {
    mark_incomplete(report, reports::Report::kBadInput, t.bad_input);
  } else if (interrupted()) {
    mark_incomplete(report, reports::Report::kInterrupted,
                    interrupt_reason() + ", after " + std::to_string(t.ran) + " of " + std::to_string(total) +
                        " scenarios");
  }
}

int run_demo(const DemoArgs& a) {
  if (!outputs_ok({}, {"--out", a.out})) return kBadInput;
  const std::string root = scenario_root(a.scenarios);
  std::vector<LoadedScenario> loaded;
  if (!demo_scenarios(root, loaded)) return kBadInput;
  InterruptScope interrupts;
  std::cout
      << "shardcheck demo: " << loaded.size() << " scenarios from " << root
      << " (catalog bugs, their fixes, and trace programs), each schedule run twice to check determinism"
      << std::endl;
  reports::Report report;
  report.title = "shardcheck demo";
  report.command = "shardcheck demo";
  DemoTally t;
  int64_t total = 0;
  for (const auto& s : loaded) total += 2 * s.schedule.runs;  // each schedule twice
  ProgressLine line(total);
  // Their lines and report entries come in order, as on one thread (run/scenario_loop.hpp).
  ScenarioLoop loop;
  loop.overrides.jobs = a.jobs;
  loop.check_determinism = true;
  loop.result = ResultOptions{};
  loop.compare_training = true;
  loop.progress = [&] { return line.scenario(); };
  auto turn = [&](size_t i) { progress(line, i, loaded.size(), loaded[i].name, ""); };
  auto deliver = [&](size_t i, CheckedRun c) {
    report.scenarios.push_back(std::move(*c.result));
    const auto& res = report.scenarios.back();
    ++t.ran;
    t.failed += res.met ? 0 : 1;
    if (c.outcome.determinism && c.outcome.determinism->matched) t.digests += c.outcome.determinism->runs;
    if (c.nondeterministic()) t.nondeterministic.push_back(loaded[i].name);
    if (!c.error.empty() && t.internal_error.empty()) t.internal_error = loaded[i].name + ": " + c.error;
    if (!c.bad_input.empty() && t.bad_input.empty()) t.bad_input = c.bad_input;
    progress(line, i, loaded.size(), loaded[i].name,
             c.stopped              ? "stopped"
             : c.nondeterministic() ? "NONDETERMINISTIC"
             : res.met              ? "ok"
                                    : "FAILED");
    return !interrupted() && t.internal_error.empty();
  };
  if (!interrupted()) run_scenarios(loaded, loop, turn, deliver);
  line.clear();
  print_table(report);
  print_ending(t, loaded.size());
  mark_stop(report, t, loaded.size());
  if (!write_report_to(report, a.out)) return kInternalError;
  return exit_code(!t.internal_error.empty(), !t.nondeterministic.empty(),
                   t.failed ? kExpectationFailed : kOk, !t.bad_input.empty());
}

}  // namespace

Action add_demo_command(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand("demo", "Run the bug catalog and the trace scenarios, with a report");
  cmd->add_option("--scenarios", a->scenarios, "Folder holding catalog/ and trace/ (default: ./scenarios)");
  cmd->add_option("--out", a->out, "Report folder (default: out/demo)");
  add_jobs_option(cmd, a->jobs);
  return [a] { return run_demo(*a); };
}

}  // namespace shardcheck::cli
