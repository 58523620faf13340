// Runs the built `shardcheck` binary from a test and captures its exit code and output.
//   CommandResult r = run_shardcheck("layout --shapes 3 --ranks 1");
//   REQUIRE(r.exit_code == 0);
#pragma once

#include <string>

namespace shardcheck::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

CommandResult run_command(const std::string& command);
CommandResult run_shardcheck(const std::string& args);
// The name reproducer lines give the binary when it runs from this test's working folder:
// `./PATH` below it, the absolute path elsewhere (cli/invocation.cpp).
std::string printed_binary();

}  // namespace shardcheck::testing
