// `shardcheck demo`: what `make demo` runs. Every seed bug of the catalog and every trace
// scenario on the simulator, buggy and fixed: a progress line, a table (scenario, expected,
// found, schedules explored, time), and a report in out/demo/. Exit 0 exactly when every
// expectation holds.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/driver.hpp"
#include "cli/reporting.hpp"

namespace shardcheck::cli {

namespace {

struct DemoArgs {
  std::string scenarios;
  std::string out = "out/demo";
};

// `scenarios/` under the working directory, else the one in the source tree this was built from.
std::string scenario_root(const std::string& given) {
  if (!given.empty()) return given;
  if (std::filesystem::is_directory("scenarios/catalog")) return "scenarios";
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

void progress(bool tty, size_t i, size_t n, const std::string& name, const std::string& done) {
  if (tty) {
    std::printf("\r\033[K[%zu/%zu] %s %s", i + 1, n, name.c_str(), done.c_str());
    if (!done.empty() && i + 1 == n) std::printf("\n");
  } else if (!done.empty()) {
    std::printf("[%zu/%zu] %s %s\n", i + 1, n, name.c_str(), done.c_str());
  }
  std::fflush(stdout);
}

void print_table(const reports::Report& r) {
  std::printf("\n%-38s %-44s %-40s %9s %8s\n", "scenario", "expected", "found", "schedules", "time");
  for (const auto& s : r.scenarios) {
    std::printf("%-38s %-44s %-40s %9d %7.3fs%s\n", s.name.c_str(), s.expected.c_str(), core::kinds_to_string(s.found).c_str(),
                s.schedules, s.seconds, s.met ? "" : "  FAILED");
  }
}

int run_demo(const DemoArgs& a) {
  const std::string root = scenario_root(a.scenarios);
  std::vector<std::string> files = yaml_files(root + "/catalog");
  for (auto& f : yaml_files(root + "/trace")) files.push_back(f);
  if (files.empty()) {
    std::cerr << "shardcheck demo: no scenarios under " << root << "/catalog or " << root << "/trace\n";
    return kBadInput;
  }
  std::vector<LoadedScenario> loaded;
  for (const auto& f : files) {
    auto s = load_scenario(f);
    if (!s) {
      std::cerr << s.error().message() << "\n";
      return kBadInput;
    }
    loaded.push_back(std::move(s).value());
  }
  const bool tty = ::isatty(STDOUT_FILENO);
  std::cout << "shardcheck demo: " << loaded.size() << " scenarios from " << root << " (seed bugs, their fixes, and trace programs)\n";
  reports::Report report;
  report.title = "shardcheck demo";
  report.command = "shardcheck demo";
  int failed = 0;
  for (size_t i = 0; i < loaded.size(); ++i) {
    progress(tty, i, loaded.size(), loaded[i].name, "");
    const ScenarioOutcome o = run_scenario(loaded[i], {});
    ResultOptions ro;
    ro.compare = loaded[i].training != nullptr;
    report.scenarios.push_back(scenario_result(loaded[i], o, {}, ro));
    const auto& res = report.scenarios.back();
    failed += res.met ? 0 : 1;
    progress(tty, i, loaded.size(), loaded[i].name, res.met ? "ok" : "FAILED");
  }
  print_table(report);
  std::cout << "\n" << loaded.size() - failed << " of " << loaded.size() << " scenarios met their expectations\n";
  if (!write_report_to(report, a.out)) return kInternalError;
  return failed ? kExpectationFailed : kOk;
}

}  // namespace

Action add_demo_command(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand("demo", "Run the seed-bug catalog and the trace scenarios, with a report");
  cmd->add_option("--scenarios", a->scenarios, "Folder holding catalog/ and trace/ (default: ./scenarios)");
  cmd->add_option("--out", a->out, "Report folder (default: out/demo)");
  return [a] { return run_demo(*a); };
}

}  // namespace shardcheck::cli
