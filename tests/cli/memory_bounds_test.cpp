// Training files at the bounds of README's Limits table run within the host memory it states:
// each file below is exactly at its bounds (one more step, rank or parameter is refused), and
// its peak resident memory, read from the child's rusage, is held to the stated figure.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/support/run_command.hpp"

using shardcheck::testing::run_shardcheck;

namespace {

// README, "Limits": a training run (run, explore, replay, compare against single_rank) peaks
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

// Runs `shardcheck run FILE` in a child and reads its peak resident set from wait4.
Peak run_measured(const std::string& file) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    ::execl(SHARDCHECK_BINARY, SHARDCHECK_BINARY, "run", file.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  REQUIRE(::wait4(pid, &status, 0, &usage) == pid);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, usage.ru_maxrss};
}

}  // namespace

TEST_CASE("training files at the memory bounds run within the host memory README states",
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
