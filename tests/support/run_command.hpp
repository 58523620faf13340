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
// A shell prefix that holds the command after it to about `mib` MiB: `ulimit -v`, or, in a
// build under AddressSanitizer (which reserves terabytes of address space for its shadow, so
// any address-space limit kills it at start), AddressSanitizer's own resident-memory limit.
std::string memory_cap(long mib);
// Whether this build runs under AddressSanitizer, where an address-space limit cannot be set.
bool under_address_sanitizer();

}  // namespace shardcheck::testing
