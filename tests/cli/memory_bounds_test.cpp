// Training files at the bounds of the Limits table of docs/limits.md run within the host memory it states:
// each file below is exactly at its bounds (one more step, rank or parameter is refused), and
// its peak resident memory, read from the child's rusage, is held to the stated figure.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run/memory_budget.hpp"
#include "tests/support/run_command.hpp"

using shardcheck::testing::run_command;
using shardcheck::testing::run_shardcheck;

namespace {

// docs/limits.md: a training run (run, explore, replay, compare against single_rank) peaks
// below this much host memory.
constexpr long kStatedKiB = 2L << 20;  // 2 GiB

std::string training(int dp, const std::string& model, int steps) {
  return "kind: training\nname: at-bound\nmesh: {dp: " + std::to_string(dp) + "}\nmodel: " + model +
         "\ndata: {source: markov, order: 1, seed: 7}\nstrategy: no_shard\nprecision: {exact: true}\n"
         "microbatches: 1\nmicro_batch_size: 13\nsteps: " +
         std::to_string(steps) +
         "\noptimizer: {kind: adam, lr: 1.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, clip_grad: 1.0}\n"
         "schedule: {policy: random, seed: 1, runs: 1}\nreference: single_rank\nexpect: {findings: []}\n";
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/shardcheck-" + name + "-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << text;
  return path;
}

struct Peak {
  int exit_code = -1;
  long max_rss_kib = 0;
};

// Runs `shardcheck run FILE ARGS...` in a child and reads its peak resident set from wait4.
Peak run_measured(const std::string& file, std::vector<std::string> args = {}) {
  args.insert(args.begin(), {SHARDCHECK_BINARY, "run", file});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execv(SHARDCHECK_BINARY, argv.data());
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  REQUIRE(::wait4(pid, &status, 0, &usage) == pid);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, usage.ru_maxrss};
}

}  // namespace

TEST_CASE("training files at the memory bounds run within the host memory docs/limits.md states",
          "[cli][limits][memory]") {
  struct Case {
    const char* what;
    std::string at, past;  // the file at its bounds, and one step past one of them
  };
  const Case cases[] = {
      // 64 ranks of full replicas: parameters * steps * ranks = 528 066 * 64 (2^25 is 33 554 432),
      // and each rank's microbatch of 13 * 13 rows * 6176 activation elements (2^26 in all).
      {"the judge's and the activations' bounds, on 64 ranks",
       training(64, "{vocab: 64, hidden: 126, layers: 4, seq: 13, tied_embeddings: true}", 1),
       training(64, "{vocab: 64, hidden: 127, layers: 4, seq: 13, tied_embeddings: true}", 1)},
      // 4 083 480 parameters (2^22 is 4 194 304) for 4 steps: the reference's 2^24.
      {"the parameter and reference bounds",
       training(1, "{vocab: 64, hidden: 270, layers: 7, seq: 1, tied_embeddings: true}", 4),
       training(1, "{vocab: 64, hidden: 270, layers: 7, seq: 1, tied_embeddings: true}", 5)},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string past = write("past-bound", c.past);
    const auto refused = run_shardcheck("run " + past);
    std::remove(past.c_str());
    REQUIRE(refused.exit_code == 2);
    REQUIRE_THAT(refused.err, Catch::Contains("exceeds the limit") || Catch::Contains("the limit is"));
    const std::string at = write("at-bound", c.at);
    const Peak p = run_measured(at);
    std::remove(at.c_str());
    INFO("peak resident memory " << p.max_rss_kib << " KiB");
    REQUIRE(p.exit_code == 0);
    REQUIRE(p.max_rss_kib < kStatedKiB);
  }
}

namespace {
// A synthetic capture (bench/gen_capture.py) of `records` per rank on 2 ranks, and the bound
// run/memory_budget.hpp states for one schedule of it, counted from its files.
struct Capture {
  std::string dir;
  int64_t stated_bytes = 0;
};
Capture synthetic_capture(int records) {
  Capture c;
  c.dir = "/tmp/shardcheck-memory-capture-" + std::to_string(::getpid());
  const auto r =
      run_command("python3 " + std::string(SHARDCHECK_SOURCE_DIR) + "/bench/gen_capture.py --out " + c.dir +
                  " --ranks 2 --records " + std::to_string(records));
  REQUIRE(r.exit_code == 0);
  int64_t n = 0, ranges = 0;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(c.dir + "/rank-" + std::to_string(rank) + ".jsonl");
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      ++n;
      for (const char* key : {"r", "w"})
        if (j.contains(key)) ranges += static_cast<int64_t>(j[key].size());
      for (const char* key : {"in", "out"}) ranges += j.contains(key) ? 1 : 0;
    }
  }
  c.stated_bytes =
      shardcheck::run::kWorkerBytesPerRecord * n + shardcheck::run::kWorkerBytesPerRange * ranges;
  return c;
}
}  // namespace

TEST_CASE("each schedule of a captured program in flight stays within its stated bound, so -j can be sized",
          "[cli][limits][memory]") {
  const Capture c = synthetic_capture(150000);
  const Peak one = run_measured(c.dir, {"--runs", "3", "-j", "1"});
  const Peak three = run_measured(c.dir, {"--runs", "3", "-j", "3"});
  std::filesystem::remove_all(c.dir);
  REQUIRE(one.exit_code == 0);
  REQUIRE(three.exit_code == 0);
  const long two_more_kib = three.max_rss_kib - one.max_rss_kib;
  INFO("peak " << one.max_rss_kib << " KiB with one schedule at once, " << three.max_rss_kib
               << " KiB with three; stated bound " << c.stated_bytes / 1024 << " KiB each");
  REQUIRE(two_more_kib <= 2 * c.stated_bytes / 1024);
  // Held to something: the workers do take memory, and the bound is within twice of it.
  REQUIRE(2 * c.stated_bytes / 1024 <= 4 * std::max(two_more_kib, 1L));
}

// Not under AddressSanitizer: its shadow takes terabytes of address space, so no address-space
// limit can be set, and the cap reads only that limit, cgroup v2 and MemAvailable.
#if !SHARDCHECK_ASAN
TEST_CASE(
    "the threads are capped to the workers that fit, and say so: every core at once would exhaust the "
    "machine",
    "[cli][limits][memory]") {
  const Capture c = synthetic_capture(150000);
  // An address space of 400 MiB beside the loaded program leaves room for about one worker.
  const auto r = run_command("ulimit -v " + std::to_string(420 * 1024 + c.stated_bytes / 1024) + "; " +
                             SHARDCHECK_BINARY + " run " + c.dir + " --runs 4 -j 4");
  std::filesystem::remove_all(c.dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.err,
               Catch::Contains("schedules at once, not 4") || Catch::Contains("schedule at once, not 4"));
  REQUIRE_THAT(r.out, Catch::Contains("1 captured program: 0 with findings, 1 clean"));
}
#endif
