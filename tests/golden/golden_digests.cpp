// The golden digests: literal values that pin determinism across builds, compilers and
// machines. The seeded engine's first outputs, the trace digest of every schedule of every
// shipped scenario (under its own schedule and under each policy for a few seeds), and the
// Chrome trace of a few replays, hashed. `make test` checks them against
// tests/golden/digests.txt; a change that is meant to alter them regenerates the file with
// `make golden` and the diff shows exactly which scenarios and seeds moved.
//   golden_digests --check tests/golden/digests.txt   # exit 1 with the differing lines
//   golden_digests --write tests/golden/digests.txt   # regenerate
//   golden_digests --check tests/golden/digests.txt --jobs 4   # the same, 4 threads exploring
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/rng.hpp"
#include "reports/chrome_trace.hpp"
#include "reports/format.hpp"
#include "run/scenario_run.hpp"

namespace fs = std::filesystem;
using namespace shardcheck;

namespace {

std::string hex(uint64_t v) { return reports::digest_text(v); }

// Doubles as C99 hex floats: every bit shows, and no locale or rounding hides a change.
std::string hexfloat(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

void rng_lines(std::vector<std::string>& out) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{42}, uint64_t{0x7fffffffffffffff}, ~uint64_t{0}}) {
    core::Rng r(seed);
    std::ostringstream line;
    line << "rng " << seed << " next";
    for (int i = 0; i < 4; ++i) line << " " << hex(r.next());
    line << " uniform(1000)";
    for (int i = 0; i < 3; ++i) line << " " << r.uniform(1000);
    line << " uniform_int(-5,5) " << r.uniform_int(-5, 5) << " real " << hexfloat(r.uniform_real())
         << " normal " << hexfloat(r.normal());
    line << " split(scheduler) " << hex(r.split("scheduler").next()) << " split(3) "
         << hex(r.split(uint64_t{3}).next());
    out.push_back(line.str());
  }
}

std::vector<std::string> scenario_files(const fs::path& root) {
  std::vector<std::string> files;
  for (const char* dir : {"catalog", "trace", "training"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root / dir, ec)) {
      if (e.path().extension() == ".yaml")
        files.push_back(fs::relative(e.path(), root.parent_path()).string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string explored_line(const std::string& rel, const std::string& label, const run::ScenarioOutcome& o) {
  std::ostringstream line;
  line << "explore " << rel << " " << label << " runs " << o.explored.runs_done << " combined "
       << hex(sim::combined_digest(o.explored.digests)) << " found " << core::kinds_to_string(o.judged.found)
       << " digests";
  for (uint64_t d : o.explored.digests) line << " " << hex(d);
  if (!o.explored.error.empty()) line << " error " << o.explored.error;
  return line.str();
}

// Each file under its own schedule, then under every policy for its first three seeds, on
// `jobs` threads (the lines do not depend on it).
bool scenario_lines(const fs::path& source, int jobs, std::vector<std::string>& out) {
  const fs::path root = source / "scenarios";
  for (const auto& rel : scenario_files(root)) {
    auto s = run::load_scenario((source / rel).string());
    if (!s) {
      std::cerr << s.error().message() << "\n";
      return false;
    }
    run::ScheduleOverrides own;
    own.jobs = jobs;
    out.push_back(explored_line(rel, "own-schedule", run::run_scenario(*s, own)));
    for (const char* policy : {"in_order", "random", "pct", "delay_comm"}) {
      run::ScheduleOverrides o;
      o.policy = policy;
      o.runs = 3;
      o.jobs = jobs;
      out.push_back(explored_line(rel, std::string("policy ") + policy, run::run_scenario(*s, o)));
    }
  }
  return true;
}

// The Chrome trace of one replay, as `shardcheck replay FILE --seed S --trace` writes it.
bool replay_lines(const fs::path& source, std::vector<std::string>& out) {
  const std::pair<const char*, uint64_t> replays[] = {
      {"scenarios/trace/reuse-race.yaml", 1},
      {"scenarios/trace/collective-swap.yaml", 1},
      {"scenarios/trace/cross-group-deadlock.yaml", 1},
      {"scenarios/trace/uninitialized-read.yaml", 1},
      {"scenarios/catalog/main-grad-alloc-default-stream.yaml", 2},
      {"scenarios/catalog/tied-grad-norm-double-count.yaml", 1},
  };
  for (const auto& [rel, seed] : replays) {
    auto s = run::load_scenario((source / rel).string());
    if (!s) {
      std::cerr << s.error().message() << "\n";
      return false;
    }
    run::ScheduleOverrides o;
    o.seed = seed;
    const sim::Options opt = run::options_for(*s, o).value();
    sim::Replay r = sim::replay(s->factory, opt);
    r.log.title = s->name + " seed " + std::to_string(opt.seed);
    const std::string json = reports::chrome_trace(r.log, r.result.findings);
    out.push_back("replay " + std::string(rel) + " seed " + std::to_string(seed) + " digest " +
                  hex(r.result.trace_digest) + " chrome_trace_fnv " + hex(core::fnv1a(json)) + " bytes " +
                  std::to_string(json.size()));
  }
  return true;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  return lines;
}

int check(const std::vector<std::string>& got, const std::string& path) {
  const std::vector<std::string> want = read_lines(path);
  if (want.empty()) {
    std::cerr << path << ": no golden lines (regenerate with `make golden`)\n";
    return 1;
  }
  int differ = 0;
  for (size_t i = 0; i < std::max(want.size(), got.size()); ++i) {
    const std::string w = i < want.size() ? want[i] : "(none)";
    const std::string g = i < got.size() ? got[i] : "(none)";
    if (w == g) continue;
    if (++differ <= 20)
      std::cout << "golden line " << i + 1 << " differs\n  want: " << w << "\n  got:  " << g << "\n";
  }
  if (differ == 0) {
    std::cout << got.size() << " golden lines matched " << path << "\n";
    return 0;
  }
  std::cout << differ << " of " << want.size()
            << " golden lines differ. If the change is meant to alter schedules or "
            << "traces, regenerate with `make golden` and commit the diff; otherwise determinism broke.\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool with_jobs = argc == 5 && std::string(argv[3]) == "--jobs" && std::atoi(argv[4]) > 0;
  if ((argc != 3 && !with_jobs) || (std::string(argv[1]) != "--check" && std::string(argv[1]) != "--write")) {
    std::cerr << "usage: golden_digests --check|--write FILE [--jobs N]\n";
    return 2;
  }
  const int jobs = with_jobs ? std::atoi(argv[4]) : 1;
  const fs::path source = SHARDCHECK_SOURCE_DIR;
  std::vector<std::string> lines;
  rng_lines(lines);
  if (!scenario_lines(source, jobs, lines) || !replay_lines(source, lines)) return 2;
  if (std::string(argv[1]) == "--check") return check(lines, argv[2]);
  std::ofstream out(argv[2]);
  out << "# Golden digests: regenerate with `make golden` only when a change is meant to alter them.\n"
      << "# Written by tests/golden/golden_digests.cpp; checked by the `golden_digests` test in `make "
         "test`.\n";
  for (const auto& l : lines) out << l << "\n";
  std::cout << "wrote " << lines.size() << " golden lines to " << argv[2] << "\n";
  return out ? 0 : 1;
}
