// Hostile input through the real binary: option values out of their range, seeds that could
// not be replayed, a layout whose chunk overflows, scenario paths that are not regular files,
// a name that is not UTF-8, and control characters in arguments. Each exits 2 with a message
// that names the problem, and nothing runs.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/run_command.hpp"

using shardcheck::testing::CommandResult;
using shardcheck::testing::run_command;
using shardcheck::testing::run_shardcheck;

namespace {
std::string scenario(const std::string& name) {
  return std::string(SHARDCHECK_SOURCE_DIR) + "/scenarios/trace/" + name;
}

std::string temp_dir() {
  char path[] = "/tmp/shardcheck-hostile-XXXXXX";
  REQUIRE(mkdtemp(path) != nullptr);
  return path;
}

// Exit 2, the message, and no digits of DBL_MAX (CLI11's NonNegativeNumber printed all 309).
void refused(const std::string& args, const std::string& says) {
  const CommandResult r = run_shardcheck(args);
  INFO(args << " -> " << r.exit_code << ": " << r.err);
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains(says));
  REQUIRE_THAT(r.err, !Catch::Contains("17976931348623157"));
  REQUIRE(r.out.empty());
}
}  // namespace

TEST_CASE(
    "values of --runs, --seed and other integer options outside their range exit 2 saying the option, the "
    "value and the range",
    "[cli][hostile]") {
  const std::string race = scenario("reuse-race.yaml");
  refused("run " + race + " --runs 0", "shardcheck: --runs: 0 is out of range 1..100000");
  refused("run " + race + " --runs 100001", "--runs: 100001 is out of range 1..100000");  // ran before
  refused("explore " + race + " --runs 2147483647",
          "--runs: 2147483647 is out of range 1..100000");  // accepted before
  refused("run " + race + " --runs 99999999999", "--runs: 99999999999 is out of range 1..100000");
  refused("run " + race + " --runs 0x10", "--runs: '0x10' is not a decimal integer (1..100000)");
  refused("replay " + race + " --seed -1", "--seed: -1 is out of range 0..9223372036854775807");
  // 2^63 was clamped to 2^63-1 and replayed as that seed.
  refused("replay " + race + " --seed 9223372036854775808",
          "--seed: 9223372036854775808 is out of range 0..9223372036854775807");
  refused("replay " + race + " --seed 18446744073709551616", "--seed: 18446744073709551616 is out of range");
  refused("props --cases 0", "--cases: 0 is out of range 1..2147483647");
  refused("props --seed -3", "--seed: -3 is out of range 0..9223372036854775807");
  refused("compare " + race + " --steps 0", "--steps: 0 is out of range 1..10000");
}

TEST_CASE("a seed at the top replays, and runs that would pass it are refused before anything runs",
          "[cli][hostile]") {
  const std::string race = scenario("reuse-race.yaml");  // schedule: runs 20
  const CommandResult top = run_shardcheck("replay " + race + " --seed 9223372036854775807");
  INFO(top.err);
  REQUIRE(top.exit_code == 0);
  REQUIRE_THAT(top.out, Catch::Contains("with seed 9223372036854775807"));
  refused("run " + race + " --seed 9223372036854775800 --runs 20",
          "--seed 9223372036854775800 with --runs 20: 20 runs from seed 9223372036854775800 would use seeds "
          "up to "
          "9223372036854775819, past the largest seed, 2^63-1 (9223372036854775807)");
  refused("explore " + race + " --seed 9223372036854775807",
          "--seed 9223372036854775807 with the file's 20 runs");
  const CommandResult fits =
      run_shardcheck("run " + race + " --seed 9223372036854775788");  // its 20th seed is 2^63-1
  INFO(fits.err);
  REQUIRE(fits.exit_code == 0);
  // A leading zero is decimal, as in scenario files; CLI11 alone read 010 as octal 8.
  REQUIRE_THAT(run_shardcheck("replay " + race + " --seed 010").out, Catch::Contains("with seed 10 "));
}

TEST_CASE("a layout whose chunk would overflow exits 2 and prints no layout", "[cli][hostile][layout]") {
  // The lcm of 2^39 and 2^39-1 wrapped: "chunk -549755813888", exit 0.
  refused("layout --shapes 1x549755813888,1x549755813887 --ranks 1",
          "the chunk, the lcm of the row sizes (549755813888 and tensor 1's 549755813887), exceeds 2^40 "
          "elements");
  refused("layout --shapes 3 --ranks 99999999999", "--ranks: 99999999999 is out of range 1..4096");
}

TEST_CASE("a scenario path that is a FIFO or a directory exits 2 at once, saying what it is",
          "[cli][hostile]") {
  const std::string dir = temp_dir(), fifo = dir + "/pipe.yaml";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Reading a FIFO waited for a writer forever; `timeout` turns a hang into exit 124.
  const CommandResult r = run_command("timeout 20 " + std::string(SHARDCHECK_BINARY) + " run " + fifo);
  INFO(r.err);
  REQUIRE(r.exit_code == 2);
  REQUIRE_THAT(r.err, Catch::Contains(fifo + ":1:1: a FIFO (named pipe), not a regular file"));
  refused("run " + dir, dir + " is a directory; pass " + dir + "/*.yaml");
  refused("run " + dir + "/nothing.yaml",
          dir + "/nothing.yaml:1:1: cannot open the file: No such file or directory");
  std::filesystem::remove_all(dir);
}

TEST_CASE("a kernel name that is not UTF-8 exits 2 at its position and writes no report", "[cli][hostile]") {
  // It loaded, then the Chrome trace writer threw (exit 3) after report.json said "complete".
  std::ifstream in(scenario("reuse-race.yaml"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  const size_t at = text.find("next_forward");
  REQUIRE(at != std::string::npos);
  text.insert(at + 5, "\xFF");
  const std::string dir = temp_dir(), file = dir + "/bad-name.yaml";
  std::ofstream(file, std::ios::binary) << text;
  refused("run " + file + " --report " + dir + "/report", "is not UTF-8; a scenario file is UTF-8 text");
  REQUIRE_FALSE(std::filesystem::exists(dir + "/report"));
  REQUIRE(run_shardcheck("replay " + file + " --seed 1 --trace " + dir + "/t.json").exit_code == 2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("control characters in arguments are escaped in every error", "[cli][hostile]") {
  // An ESC [2J echoed raw clears the screen of whoever reads the message.
  const CommandResult unknown = run_shardcheck("'\x1b[2J'");
  REQUIRE(unknown.exit_code == 2);
  REQUIRE_THAT(unknown.err, Catch::Contains("unknown command '\\x1b[2J'"));
  const CommandResult option = run_shardcheck("layout --shapes 3 --ranks 1 '--x\x1b[2J'");
  REQUIRE(option.exit_code == 2);
  REQUIRE_THAT(option.err, Catch::Contains("\\x1b[2J"));
  const CommandResult value = run_shardcheck("layout --shapes 3 --ranks '1\x1b[2J'");
  REQUIRE(value.exit_code == 2);
  REQUIRE_THAT(value.err, Catch::Contains("--ranks: '1\\x1b[2J' is not a decimal integer"));
  // Values a command reads itself, after parsing, come back escaped too.
  const CommandResult shapes = run_shardcheck("layout --shapes '5x\x1b[2J' --ranks 1");
  REQUIRE(shapes.exit_code == 2);
  REQUIRE_THAT(shapes.err, Catch::Contains("dimension '\\x1b[2J' is not a positive integer"));
  const CommandResult policy = run_shardcheck("run " + scenario("reuse-race.yaml") + " --policy '\x1b[2J'");
  REQUIRE(policy.exit_code == 2);
  REQUIRE_THAT(policy.err, Catch::Contains("--policy: \\x1b[2J not in {in_order,random,pct,delay_comm}"));
  for (const auto* r : {&unknown, &option, &value, &shapes, &policy})
    REQUIRE(r->err.find('\x1b') == std::string::npos);
}
